"""Kimi K2's tokenizer class for gguf_test.py's kimi-k2 case, copied beside the tiny model as
tokenization_kimi.py (tokenizer_config.json's auto_map names it, as Kimi K2's does).

Kimi K2 ships its tokenizer as remote code (moonshotai/Kimi-K2-*'s tokenization_kimi.py, a
TikTokenTokenizer over tiktoken.model), not on PyPI; this is written for the test and does what
llama.cpp's converter reads of that class (conversion/deepseek.py, DeepseekV2Model.set_vocab's
kimi-k2 branch): `model._mergeable_ranks`, tiktoken's load_tiktoken_bpe of tiktoken.model (one
`base64(token) rank` a line, in the file's order), and `special_tokens`, the 256 + 2 ids after the
ranks, each named by tokenizer_config.json's added_tokens_decoder or `<|reserved_token_{id}|>`.
Encoding (needed only for the converter's pre-tokenizer digest, which the test maps to kimi-k2) is
Kimi's split pattern and tiktoken's byte-pair merge, in plain Python: the project's virtualenv has
no tiktoken.
"""
import base64
import os

import regex
from transformers.convert_slow_tokenizer import bytes_to_unicode
from transformers.tokenization_utils import PreTrainedTokenizer

PATTERN = "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?[[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]--\p{Han}]*[[\p{Ll}\p{Lm}\p{Lo}\p{M}]--\p{Han}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]--\p{Han}]+[[\p{Ll}\p{Lm}\p{Lo}\p{M}]--\p{Han}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])


class _Model:
    def __init__(self, ranks):
        self._mergeable_ranks = ranks


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


class TikTokenTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "tiktoken.model"}
    model_input_names = ["input_ids", "attention_mask"]
    num_reserved_special_tokens = 256

    def __init__(self, vocab_file, bos_token="[BOS]", eos_token="[EOS]", unk_token=None, pad_token=None,
                 additional_special_tokens=None, added_tokens_decoder=None, **kwargs):
        assert os.path.isfile(vocab_file), vocab_file
        names = {int(i): getattr(t, "content", t) for i, t in (added_tokens_decoder or {}).items()}
        ranks = load_ranks(vocab_file)
        base = len(ranks)
        self.special_tokens = {names.get(i, f"<|reserved_token_{i}|>"): i
                               for i in range(base, base + self.num_reserved_special_tokens + 2)}
        self.model = _Model(ranks)
        self.pattern = regex.compile(PATTERN, regex.V1)
        enc = bytes_to_unicode()
        self.decoder = {r: "".join(enc[b] for b in t) for t, r in ranks.items()}
        self.decoder.update({i: n for n, i in self.special_tokens.items()})
        self.encoder = {s: i for i, s in self.decoder.items()}
        super().__init__(bos_token=bos_token, eos_token=eos_token, unk_token=unk_token, pad_token=pad_token,
                         additional_special_tokens=additional_special_tokens, added_tokens_decoder=added_tokens_decoder,
                         **kwargs)

    def _bpe(self, piece):
        ranks = self.model._mergeable_ranks
        parts = [bytes([b]) for b in piece]
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: ranks.get(parts[i] + parts[i + 1], 1 << 62))
            if parts[best] + parts[best + 1] not in ranks:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        return [ranks[p] for p in parts]

    def encode(self, text, **kwargs):
        if kwargs:
            return super().encode(text, **kwargs)
        return [i for m in self.pattern.findall(text) for i in self._bpe(m.encode())]

    @property
    def vocab_size(self):
        return len(self.decoder)

    def get_vocab(self):
        return dict(self.encoder)

    def _tokenize(self, text, **kwargs):
        return [self.decoder[i] for i in self.encode(text)]

    def _convert_token_to_id(self, token):
        return self.encoder.get(token, self.special_tokens.get(str(self.unk_token)))

    def _convert_id_to_token(self, index):
        return self.decoder.get(index)

    def save_vocabulary(self, save_directory, filename_prefix=None):
        return ()
