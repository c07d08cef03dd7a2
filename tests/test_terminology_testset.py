"""scripts/terminology_testset.py's term list: mutual-best Dice pairs of German nouns and English words, on a small
parallel corpus whose translations are known."""

from terminology_testset import holds, noun_counts, term_pairs

GERMAN = ["Der Hund spielt mit dem Ball.", "Ein Hund schläft.", "Die Katze sieht den Ball.", "Eine Katze läuft.",
          "Die Frau liest.", "Eine Frau singt.", "Die Frau lacht.", "Eine Frau tanzt."] * 2
ENGLISH = ["The dog plays with the ball.", "A dog sleeps.", "The cat sees the ball.", "A cat runs.",
           "The woman reads.", "A lady sings.", "The woman laughs.", "A lady dances."] * 2


def test_nouns_pair_with_their_translations_and_unclear_pairs_are_left_out():
    pairs = term_pairs(GERMAN, ENGLISH, min_count=4, min_dice=0.72)
    assert {(pair["source"], pair["target"]) for pair in pairs} == {("Hund", "dog"), ("Katze", "cat"),
                                                                   ("Ball", "ball")}
    # Frau: "woman" in half its sentences, "lady" in the other half: Dice 2 x 4 / (8 + 4) = 0.67 < 0.72
    assert {(pair["source"], pair["target"]) for pair in term_pairs(GERMAN, ENGLISH, 4, 0.6)} >= {("Frau", "woman")}
    assert all(pair["dice"] == 1.0 and pair["joint_sentences"] == 4 for pair in pairs)


def test_nouns_are_words_written_capitalized_inside_sentences():
    # Der/Die/Ein/Eine are capitalized only where they start a sentence; mit, dem, den are never capitalized
    assert noun_counts(GERMAN, min_count=2) == {"hund": "Hund", "katze": "Katze", "ball": "Ball", "frau": "Frau"}


def test_a_term_is_found_as_whole_words_in_any_case():
    assert holds("A Dog runs.", "dog") and holds("in New York city", "new york")
    assert not holds("Two dogs run.", "dog") and not holds("new yorker", "new york")
