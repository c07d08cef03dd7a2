#!/usr/bin/env python
"""Build a terminology test set from Multi30k and measure what `hf-s2s translate --glossary` does with it.

    python scripts/terminology_testset.py runs/x/model runs/x/terminology              # data: $HF_S2S_DATA_DIR
    python scripts/terminology_testset.py runs/x/model out --data_dir /data/multi30k --beams 1 5

The term list is built from the training split, nothing is committed: a German word that is written capitalized
inside sentences (a noun) and occurs in at least --min_count training sentences is paired with the English word of
the highest Dice score, 2 c(de, en) / (c(de) + c(en)) over the sentences holding them; the pair is kept when each is
the other's best match (mutual best) and the score is at least --min_dice, so the pairs are clearly translations
(Hund/dog, Mann/man). The glossary is these pairs, the German form as written in the corpus, the English one as most
often written; a form is its own entry (Hund and Hunde are two), as the glossary does not model inflection.

Then test_2016_flickr is translated by `hf-s2s translate` (a subprocess, one thread) with and without
`--glossary`, for each --beams, and reported as a Markdown table:

- term appearance: of the (sentence, term) pairs whose source holds a glossary term (as the glossary matches it: whole
  words, any case, on the text the model reads), the share whose output holds the target term as a whole word (any
  case); also over the pairs whose reference holds the target term too (the term fits the sentence);
- BLEU (sacreBLEU, as `hf-s2s translate --reference` scores) on the whole test set and on the term-holding lines;
- the property that a line holding no term is translated exactly as without the glossary (lines that differ).

Everything is written to OUTPUT (a new or empty folder): terms.tsv (the pairs with their counts and scores),
glossary.tsv, test.de / test.en (the test set), term_lines.txt (line numbers of the term-holding lines), the
hypothesis files and results.json.
"""

import argparse
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from hf_s2s.data.corpus import load_multi30k
from hf_s2s.metrics import compute_translation_metrics
from hf_s2s.models.loading import load_tokenizer
from hf_s2s.models.term_constraints import Glossary, words

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/checkout.py
from checkout import use_shared_corpus  # noqa: E402

_WORD = re.compile(r"\w+")


def noun_counts(sentences: list[str], min_count: int) -> dict[str, str]:
    """The German words (case-folded) capitalized in at least 90% of their occurrences after a sentence's first word
    and found in at least ``min_count`` sentences, mapped to their most frequent written form."""
    inside, capitalized, forms, documents = Counter(), Counter(), {}, Counter()
    for sentence in sentences:
        tokens = _WORD.findall(sentence)
        for position, token in enumerate(tokens):
            key = token.casefold()
            forms.setdefault(key, Counter())[token] += 1
            if position > 0:
                inside[key] += 1
                capitalized[key] += token[:1].isupper()
        documents.update({token.casefold() for token in tokens})
    return {key: forms[key].most_common(1)[0][0] for key, count in documents.items()
            if count >= min_count and len(key) > 2 and not key.isdigit() and inside[key] >= min_count // 2
            and capitalized[key] >= 0.9 * inside[key]}


def term_pairs(german: list[str], english: list[str], min_count: int, min_dice: float) -> list[dict]:
    """Mutual-best Dice pairs of German nouns and English words over aligned sentences (see the module docstring),
    highest score first."""
    nouns = noun_counts(german, min_count)
    german_sets = [set(words(sentence)) & nouns.keys() for sentence in german]
    english_sets = [set(words(sentence)) for sentence in english]
    english_count = Counter(word for found in english_sets for word in found)
    german_count = Counter(word for found in german_sets for word in found)
    joint = Counter((de, en) for de_words, en_words in zip(german_sets, english_sets, strict=True)
                    for de in de_words for en in en_words)
    dice = {pair: 2 * count / (german_count[pair[0]] + english_count[pair[1]]) for pair, count in joint.items()}
    best_english, best_german = {}, {}
    for (de, en), score in dice.items():
        if score > dice.get((de, best_english.get(de)), -1):
            best_english[de] = en
        if score > dice.get((best_german.get(en), en), -1):
            best_german[en] = de
    english_forms = Counter(token for sentence in english for token in _WORD.findall(sentence))
    pairs = []
    for de, en in best_english.items():
        if best_german.get(en) != de or dice[de, en] < min_dice or len(en) < 3:
            continue
        written = max((form for form in (en, en.capitalize(), en.upper())), key=lambda form: english_forms[form])
        pairs.append({"source": nouns[de], "target": written, "dice": round(dice[de, en], 4),
                      "source_sentences": german_count[de], "target_sentences": english_count[en],
                      "joint_sentences": joint[de, en]})
    return sorted(pairs, key=lambda pair: (-pair["dice"], pair["source"]))


def holds(text: str, term: str) -> bool:
    """Whether ``text`` holds ``term`` as whole words, in any case."""
    sentence, wanted = words(text), words(term)
    return any(sentence[start : start + len(wanted)] == wanted for start in range(len(sentence) - len(wanted) + 1))


def translate(model: str, source: Path, output: Path, beams: int, glossary: Path | None) -> list[str]:
    """`hf-s2s translate` of ``source`` into ``output`` (one thread), its lines."""
    command = [sys.executable, "-m", "hf_s2s.cli", "translate", model, "--input", str(source), "--beams", str(beams)]
    if glossary is not None:
        command += ["--glossary", str(glossary)]
    with output.open("w", encoding="utf-8") as stream:
        subprocess.run(command, stdout=stream, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return output.read_text(encoding="utf-8").split("\n")[:-1]


def bleu(hypotheses: list[str], references: list[str]) -> float:
    return round(compute_translation_metrics(hypotheses, references)["bleu"], 2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a saved de-en model folder")
    parser.add_argument("output", help="a new or empty folder for the test set, the outputs and results.json")
    parser.add_argument("--data_dir", default=None, help="the Multi30k folder (else $HF_S2S_DATA_DIR)")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="beam sizes to measure")
    parser.add_argument("--min_count", type=int, default=100, help="training sentences a German noun must be in")
    parser.add_argument("--min_dice", type=float, default=0.72, help="the lowest Dice score of a kept pair")
    args = parser.parse_args(argv)
    output = Path(args.output)
    try:
        if output.exists() and (not output.is_dir() or any(output.iterdir())):
            raise ValueError(f"{output} exists and is not an empty folder; give a new one")
        tokenizer = load_tokenizer(args.model)
        corpus = load_multi30k("de", "en", data_dir=args.data_dir, hub_name=None)
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    train, test = corpus["train"]["translation"], corpus["test"]["translation"]
    pairs = term_pairs([pair["de"] for pair in train], [pair["en"] for pair in train], args.min_count, args.min_dice)
    if not pairs:
        sys.exit(f"error: no term pair has a Dice score >= {args.min_dice} over nouns in >= {args.min_count} "
                 "training sentences; lower --min_dice or --min_count")
    glossary = Glossary.from_pairs([(pair["source"], pair["target"]) for pair in pairs])
    sources, references = [pair["de"] for pair in test], [pair["en"] for pair in test]
    # matched as the translation matches them: on the source ids decoded back
    read = tokenizer.batch_decode(tokenizer(sources)["input_ids"], skip_special_tokens=True)
    needed = [glossary.matches(text) for text in read]
    term_lines = [number for number, terms in enumerate(needed) if terms]
    output.mkdir(parents=True, exist_ok=True)
    with (output / "terms.tsv").open("w", encoding="utf-8") as stream:
        stream.write("source\ttarget\tdice\tsource_sentences\ttarget_sentences\tjoint_sentences\n")
        stream.writelines("\t".join(str(value) for value in pair.values()) + "\n" for pair in pairs)
    (output / "glossary.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in glossary.entries), encoding="utf-8")
    (output / "test.de").write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    (output / "test.en").write_text("".join(line + "\n" for line in references), encoding="utf-8")
    (output / "term_lines.txt").write_text("".join(f"{number}\n" for number in term_lines), encoding="utf-8")
    occurrences = [(number, term) for number in term_lines for term in needed[number]]
    fitting = [(number, term) for number, term in occurrences if holds(references[number], term)]
    results = {"model": args.model, "terms": len(glossary), "test_lines": len(sources),
               "term_lines": len(term_lines), "term_occurrences": len(occurrences),
               "occurrences_in_reference": len(fitting), "runs": []}
    print(f"{len(glossary)} terms; {len(term_lines)} of {len(sources)} test lines hold one ({len(occurrences)} "
          f"occurrences, {len(fitting)} with the target term in the reference)", file=sys.stderr)
    subset_references = [references[number] for number in term_lines]
    for beams in args.beams:
        plain = translate(args.model, output / "test.de", output / f"beam{beams}.plain.en", beams, None)
        constrained = translate(args.model, output / "test.de", output / f"beam{beams}.glossary.en", beams,
                                output / "glossary.tsv")
        for name, hypotheses in (("without", plain), ("with", constrained)):
            results["runs"].append({
                "beams": beams, "glossary": name,
                "appearance": round(sum(holds(hypotheses[n], t) for n, t in occurrences) / len(occurrences), 4),
                "appearance_reference_terms": round(sum(holds(hypotheses[n], t) for n, t in fitting) / len(fitting), 4),
                "bleu": bleu(hypotheses, references),
                "bleu_term_lines": bleu([hypotheses[n] for n in term_lines], subset_references)})
        results["runs"][-1]["termless_lines_changed"] = sum(
            plain[n] != constrained[n] for n in range(len(sources)) if not needed[n])
    (output / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"| beams | glossary | term appearance, all {len(occurrences)} | in reference, {len(fitting)} | "
          f"BLEU, {len(sources)} lines | BLEU, {len(term_lines)} term lines |\n|---|---|---|---|---|---|")
    for run in results["runs"]:
        print(f"| {run['beams']} | {run['glossary']} | {100 * run['appearance']:.1f}% | "
              f"{100 * run['appearance_reference_terms']:.1f}% | {run['bleu']:.2f} | {run['bleu_term_lines']:.2f} |")
    for run in results["runs"][1::2]:
        print(f"beam {run['beams']}: {run['termless_lines_changed']} of {len(sources) - len(term_lines)} lines "
              "without a term translate differently with the glossary")
    return 0


if __name__ == "__main__":
    use_shared_corpus(sys.argv[1:])
    sys.exit(main())
