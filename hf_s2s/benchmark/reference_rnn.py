"""The textbook attention RNN encoder-decoder the benchmark measures hf_s2s's RNN family against.

Written the way tutorials write it, on purpose: padding runs through the encoder (no packing), every decoder step
re-projects all encoder states for its attention score (no precomputed keys), and greedy decoding is a plain loop
over ``*Cell`` modules holding nothing but the recurrent state. Same sizes and the same equations as
``RNNSeq2SeqForConditionalGeneration`` with a bridge-initialised decoder:

- bahdanau (arXiv:1409.0473): c_t = attn(s_{t-1}, h), s_t = cell([y_{t-1}; c_t], s_{t-1});
- luong_general with input feeding (arXiv:1508.04025): h_t = cell([y_{t-1}; h~_{t-1}], h_{t-1}),
  c_t = attn(h_t, h), h~_t = tanh(W_c [c_t; h_t]).
"""

import torch
import torch.nn.functional as F
from torch import nn


class TextbookRNNSeq2Seq(nn.Module):
    def __init__(
        self, vocab_size: int, embedding_size: int, encoder_hidden_size: int, decoder_hidden_size: int,
        attention_size: int, cell_type: str = "gru", attention_type: str = "bahdanau", dropout: float = 0.1,
    ):
        super().__init__()
        if cell_type not in ("gru", "lstm") or attention_type not in ("bahdanau", "luong_general"):
            raise ValueError(f"unsupported cell_type={cell_type!r} / attention_type={attention_type!r}; allowed: "
                             "cell_type 'gru'/'lstm', attention_type 'bahdanau'/'luong_general'")
        self.lstm = cell_type == "lstm"
        self.luong = attention_type == "luong_general"
        memory_size = 2 * encoder_hidden_size
        self.encoder_hidden_size = encoder_hidden_size
        self.source_embed = nn.Embedding(vocab_size, embedding_size, padding_idx=0)
        self.target_embed = nn.Embedding(vocab_size, embedding_size, padding_idx=0)
        rnn = nn.LSTM if self.lstm else nn.GRU
        self.encoder = rnn(embedding_size, encoder_hidden_size, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(memory_size, decoder_hidden_size)
        cell = nn.LSTMCell if self.lstm else nn.GRUCell
        self.cell = cell(embedding_size + (decoder_hidden_size if self.luong else memory_size), decoder_hidden_size)
        if self.luong:
            self.key_proj = nn.Linear(memory_size, decoder_hidden_size, bias=False)  # W_a
        else:
            self.query_proj = nn.Linear(decoder_hidden_size, attention_size, bias=False)  # W_q
            self.key_proj = nn.Linear(memory_size, attention_size, bias=False)  # W_h
            self.energy = nn.Linear(attention_size, 1, bias=False)  # v
        self.readout = nn.Linear(memory_size + decoder_hidden_size, decoder_hidden_size)
        self.output = nn.Linear(decoder_hidden_size, vocab_size, bias=False)
        self.dropout = nn.Dropout(dropout)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """input_ids, attention_mask (B, S) -> memory (B, S, 2 He), mask (B, S) bool, initial decoder state."""
        memory, _ = self.encoder(self.dropout(self.source_embed(input_ids)))  # padding goes through the RNN
        mask = attention_mask.bool()
        rows = torch.arange(memory.shape[0])
        last = mask.sum(dim=1) - 1
        half = self.encoder_hidden_size
        final = torch.cat([memory[rows, last, :half], memory[:, 0, half:]], dim=-1)  # (B, 2 He)
        hidden = torch.tanh(self.bridge(final))  # (B, Hd)
        state = (hidden, torch.zeros_like(hidden)) if self.lstm else hidden
        return memory, mask, state

    def attend(self, query: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """query (B, Hd) -> context (B, 2 He). Projects all of the memory again, as the textbook loop does."""
        keys = self.key_proj(memory)  # (B, S, A), recomputed every step
        if self.luong:
            scores = torch.bmm(keys, query[:, :, None]).squeeze(-1)  # (B, S)
        else:
            scores = self.energy(torch.tanh(self.query_proj(query)[:, None, :] + keys)).squeeze(-1)  # (B, S)
        weights = scores.masked_fill(~mask, -1e9).softmax(dim=-1)  # (B, S)
        return torch.bmm(weights[:, None, :], memory).squeeze(1)  # (B, 2 He)

    def step(self, tokens: torch.Tensor, state, feed: torch.Tensor | None, memory, mask):
        """tokens (B,) -> logits (B, V), new state, attentional vector (B, Hd)."""
        embeds = self.dropout(self.target_embed(tokens))  # (B, D)
        if self.luong:
            state = self.cell(torch.cat([embeds, feed], dim=-1), state)
            hidden = state[0] if self.lstm else state
            context = self.attend(hidden, memory, mask)
        else:
            context = self.attend(state[0] if self.lstm else state, memory, mask)
            state = self.cell(torch.cat([embeds, context], dim=-1), state)
            hidden = state[0] if self.lstm else state
        readout = torch.tanh(self.readout(torch.cat([context, hidden], dim=-1)))  # (B, Hd)
        return self.output(self.dropout(readout)), state, readout

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor,
                decoder_start_token_id: int = 1) -> torch.Tensor:
        """Teacher-forced mean token cross-entropy. labels (B, T) with -100 on padding."""
        memory, mask, state = self.encode(input_ids, attention_mask)
        inputs = torch.cat([labels.new_full((labels.shape[0], 1), decoder_start_token_id), labels[:, :-1]], dim=1)
        inputs = inputs.masked_fill(inputs == -100, 0)
        feed = memory.new_zeros(memory.shape[0], self.readout.out_features)
        logits = []
        for t in range(inputs.shape[1]):
            step_logits, state, feed = self.step(inputs[:, t], state, feed, memory, mask)
            logits.append(step_logits)
        logits = torch.stack(logits, dim=1)  # (B, T, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)

    @torch.no_grad()
    def greedy(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_tokens: int,
               decoder_start_token_id: int = 1) -> torch.Tensor:
        """Exactly ``num_tokens`` argmax tokens per sentence -> (B, num_tokens)."""
        memory, mask, state = self.encode(input_ids, attention_mask)
        tokens = input_ids.new_full((input_ids.shape[0],), decoder_start_token_id)
        feed = memory.new_zeros(memory.shape[0], self.readout.out_features)
        out = []
        for _ in range(num_tokens):
            logits, state, feed = self.step(tokens, state, feed, memory, mask)
            tokens = logits.argmax(dim=-1)
            out.append(tokens)
        return torch.stack(out, dim=1)
