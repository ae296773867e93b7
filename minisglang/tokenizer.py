"""The tokenizer: text <-> token ids, and the exact bytes every token id contributes.

Constrained decoding works on bytes, not on the tokenizer's display strings: the token
index walks a byte-level DFA with `token_bytes[i]` for every id i. So this module's
central product is that table, built exactly for the three vocabulary families:

- "byte_level" (GPT-2, Llama 3, Qwen2, tekken, our bundled model): every byte is drawn
  as one printable character (GPT-2's table, so a space is `Ġ`); a token's bytes are
  its characters mapped back through that table.
- "sentencepiece" (Llama 1/2, Mistral v1-v3): `▁` stands for a space and `<0xNN>` is
  the single byte NN (byte fallback for characters not in the vocabulary).
- "plain": the token string's UTF-8.

Special tokens (`<s>`, `</s>`, `[INST]`, ...) contribute no text: their entry is None; so
does the end-of-sequence token where the vocabulary lists it as an ordinary piece.

Two decisions make the round-trip law `b"".join(token_bytes[i] for i in encode(t)) ==
normalize(t).encode()` hold exactly:
1. `encode` never adds an implicit prefix space. SentencePiece normally prepends a dummy
   `▁` (so "Hello" becomes "▁Hello"), and some byte-level tokenizers set
   `add_prefix_space`; we switch both off, because a prefix space is text the user never
   wrote. To get SentencePiece's native tokenization of a text, write the space
   yourself: `encode(" " + text)` equals sentencepiece's `encode(text)`. Prompts are the
   exception: `encode_prompt` and `encode_chat` give the ids the checkpoint's own tokenizer
   gives (`hf_prompt`, its tokenizer.json as written: Llama 2's `<s>▁[INST]`), because that
   is the text the model was trained on; only what the model writes obeys the law.
2. `normalize(text)` says what the tokens spell: the tokenizer's own Unicode normalizer
   (some vocabularies apply NFKC, turning "，" into ",") and, for SentencePiece, a
   literal `▁` read as the space it stands for. For most tokenizers and texts it is the
   identity.

Text equal to a special token's string ("</s>") is encoded as that special token, as
Hugging Face does, so the law needs text free of special-token strings. That is right for
a chat template's own role markers and wrong for what a user wrote: `encode_chat`
encodes a chat so that special tokens come only from the template (a message saying
"<|assistant|>" cannot forge a turn).

`decode` is built on the same byte table (not on Hugging Face's decoders), so decoding a
prefix of the ids always gives a prefix of the text; that is what lets
`IncrementalDetokenizer` stream exactly what `decode` returns.
"""

from __future__ import annotations

import base64
import bisect
import codecs
import datetime
import functools
import hashlib
import itertools
import json
import re
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.sandbox
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

BYTE_LEVEL = "byte_level"
SENTENCEPIECE = "sentencepiece"
PLAIN = "plain"

SPACE_MARK = "\u2581"  # SentencePiece's `▁`
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")

# Names tried, in order, when a tokenizer's files do not say which token ends a sequence.
EOS_CANDIDATES = ("</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<eos>", "<EOT>")

# The special tokens that older tekken files leave implicit (mistral-common's defaults);
# ids past these are filled with "<SPECIAL_{id}>".
TEKKEN_DEFAULT_SPECIALS = (
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
)


class PromptTooLong(ValueError):
    """A rendered chat longer (in UTF-8 bytes) than the caller's `max_bytes`: refused before
    it is tokenized (Hugging Face's encode holds the GIL: 3 MB took every client's 5 s)."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"the rendered prompt has {size:,} bytes, more than {limit:,}")
        self.size, self.limit = size, limit


@dataclass
class ChatPrompt:
    """A chat rendered by its template (`text`) and the token ids the model reads (`ids`).

    `ids` is not always `encode(text)`: text that a message spells like a special token
    is kept as ordinary text (see `Tokenizer.encode_chat`). Engine.submit takes one.
    """

    text: str
    ids: list[int]


def gpt2_byte_to_unicode() -> dict[int, str]:
    """GPT-2's table: each of the 256 bytes -> one printable character.

    Printable Latin-1 bytes stand for themselves; the 68 others (controls, space, ...)
    are moved to U+0100 onwards in byte order, which is why a space (0x20) shows as `Ġ`.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, moved = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + moved)
            moved += 1
    return table


BYTE_TO_UNICODE = gpt2_byte_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in BYTE_TO_UNICODE.items()}


def piece_bytes(piece: str, family: str) -> bytes:
    """The exact bytes a (non-special) vocabulary string stands for in ``family``."""
    if family == BYTE_LEVEL:
        if all(c in UNICODE_TO_BYTE for c in piece):
            return bytes(UNICODE_TO_BYTE[c] for c in piece)
        return piece.encode()  # like HF's ByteLevel decoder: a foreign token stays as written
    if family == SENTENCEPIECE:
        m = _BYTE_PIECE.fullmatch(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        return piece.replace(SPACE_MARK, " ").encode()
    return piece.encode()


def _component_types(spec) -> list[dict]:
    """Every component (dict with a "type") nested anywhere inside a tokenizer.json part."""
    found = []
    if isinstance(spec, dict):
        if "type" in spec:
            found.append(spec)
        for value in spec.values():
            found += _component_types(value)
    elif isinstance(spec, list):
        for value in spec:
            found += _component_types(value)
    return found


def detect_family(spec: dict) -> str:
    """Which vocabulary family a parsed tokenizer.json belongs to (see module docstring)."""
    parts = _component_types([spec.get("pre_tokenizer"), spec.get("decoder")])
    if any(p["type"] == "ByteLevel" for p in parts):
        return BYTE_LEVEL
    parts += _component_types(spec.get("normalizer"))
    uses_space_mark = any(
        p["type"] == "Metaspace" or (p["type"] == "Replace" and SPACE_MARK in json.dumps(p, ensure_ascii=False))
        for p in parts
    )
    if uses_space_mark or (spec.get("model") or {}).get("byte_fallback"):
        return SENTENCEPIECE
    return PLAIN


def _without_prefix_space(spec: dict) -> bool:
    """Switch off every implicit prefix space in a parsed tokenizer.json (in place); whether
    there may have been one to switch off (a key left to its default counts as one).

    That is SentencePiece's dummy `▁` (a `Prepend` normalizer or `Metaspace`'s
    prepend_scheme) and byte-level `add_prefix_space`; see decision 1 in the docstring.
    """
    normalizer, switched = spec.get("normalizer"), False
    if normalizer and normalizer.get("type") == "Prepend":
        spec["normalizer"], switched = None, True
    elif normalizer and normalizer.get("type") == "Sequence":
        kept = [n for n in normalizer["normalizers"] if n.get("type") != "Prepend"]
        switched = len(kept) < len(normalizer["normalizers"])
        normalizer["normalizers"] = kept
    for part in _component_types(spec.get("pre_tokenizer")):
        if part["type"] == "Metaspace":
            switched |= part.get("prepend_scheme") != "never" or part.get("add_prefix_space") is not False
            part["prepend_scheme"] = "never"
            part["add_prefix_space"] = False  # the key older tokenizer.json files use
        if part["type"] == "ByteLevel":
            switched |= part.get("add_prefix_space") is not False
            part["add_prefix_space"] = False
    return switched


def _protobuf_fields(buf: bytes) -> Iterable[tuple[int, int | bytes]]:
    """(field number, value) for each field of one protobuf message, in order.

    Varints come back as int, everything else as its raw bytes; enough to read
    SentencePiece's .model file without the protobuf package.
    """

    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            b = buf[i]
            value |= (b & 0x7F) << shift
            shift, i = shift + 7, i + 1
            if b < 0x80:
                return value, i

    i = 0
    while i < len(buf):
        key, i = varint(i)
        number, wire_type = key >> 3, key & 7
        value: int | bytes
        if wire_type == 0:
            value, i = varint(i)
        elif wire_type == 2:
            length, i = varint(i)
            value, i = buf[i : i + length], i + length
        elif wire_type in (1, 5):  # fixed 64-bit / 32-bit
            size = 8 if wire_type == 1 else 4
            value, i = buf[i : i + size], i + size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
        yield number, value


def _int_field(fields: dict[int, int | bytes], number: int, default: int) -> int:
    """A varint field of a message read by `_protobuf_fields` (``default`` when absent)."""
    value = fields.get(number, default)
    if not isinstance(value, int):
        raise ValueError(f"protobuf field {number} should be a number, got {len(value)} bytes")
    return value


def _bytes_field(fields: dict[int, int | bytes], number: int, default: bytes) -> bytes:
    """A length-delimited or fixed-size field of a message read by `_protobuf_fields`."""
    value = fields.get(number, default)
    if not isinstance(value, bytes):
        raise ValueError(f"protobuf field {number} should be bytes or a message, got the number {value}")
    return value


class Tokenizer:
    """A Hugging Face `tokenizers.Tokenizer` plus the exact byte table of its vocabulary.

    Build one with `from_pretrained`, `from_tekken` or `from_sentencepiece`.
    """

    def __init__(
        self,
        hf: HFTokenizer,
        family: str,
        eos_token_id: int,
        chat_template: str | None = None,
        template_tokens: dict[str, str] | None = None,
        source: str = "",
        named_templates: dict[str, str] | None = None,
        hf_prompt: HFTokenizer | None = None,
    ):
        self.hf = hf
        # The checkpoint's tokenizer as written, prefix spaces and all, for prompts (decision 1).
        self.hf_prompt = hf if hf_prompt is None else hf_prompt
        self.family = family
        self.eos_token_id = eos_token_id
        self.chat_template = chat_template  # the default template
        # The checkpoint's other templates by name; "tool_use" renders a chat given tools.
        self.named_templates = dict(named_templates or {})
        self.template_tokens = dict(template_tokens or {})  # bos_token etc. for the template
        self.source = source

        vocab = hf.get_vocab(with_added_tokens=True)
        added = hf.get_added_tokens_decoder()  # id -> AddedToken
        self.vocab_size: int = max(vocab.values()) + 1
        table: list[bytes | None] = [None] * self.vocab_size
        for piece, token_id in hf.get_vocab(with_added_tokens=False).items():
            table[token_id] = piece_bytes(piece, family)
        for token_id, token in added.items():
            # Added non-special tokens are matched in raw text, so they spell their content.
            table[token_id] = None if token.special else token.content.encode()
        self.special_token_ids: frozenset[int] = frozenset(i for i, t in added.items() if t.special)
        self._special_text = {i: added[i].content.encode() for i in self.special_token_ids}
        # The end-of-sequence token ends the output: it is no text, even where the vocabulary
        # lists it as an ordinary piece (an "<eos>" that is no special token). Every grammar
        # backend already reads it so; the output text had it ("abz<eos>" for `a[b-z]{0,3}`).
        eos_text = table[eos_token_id] if 0 <= eos_token_id < self.vocab_size else None
        if eos_text is not None:
            table[eos_token_id] = None
            self._special_text[eos_token_id] = eos_text  # (shown by decode(skip_special_tokens=False))
        self.token_bytes: list[bytes | None] = table  # None: a special token, the EOS or an unused id
        texts = sorted({added[i].content for i in self.special_token_ids}, key=len, reverse=True)
        self._special_pattern = re.compile("|".join(map(re.escape, texts))) if texts else None
        self._text_only: dict[int, HFTokenizer] = {}  # see _text_only_copy
        self.fingerprint: str = self._compute_fingerprint()

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_pretrained(cls, path) -> Tokenizer:
        """Load a directory holding tokenizer.json (+ optional tokenizer_config.json,
        special_tokens_map.json and chat_template.jinja), or a tokenizer.json file (its directory's config is used)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"tokenizer path does not exist: {path}")
        json_path = path / "tokenizer.json" if path.is_dir() else path
        folder = json_path.parent
        if not json_path.is_file():
            hint = ""
            if (folder / "tokenizer.model").exists():
                hint = " (there is a tokenizer.model: use Tokenizer.from_sentencepiece)"
            raise FileNotFoundError(f"no tokenizer.json in {folder}: looked for {json_path}{hint}")
        written = json_path.read_text(encoding="utf-8")
        spec = json.loads(written)
        prefixed = _without_prefix_space(spec)
        hf_prompt = HFTokenizer.from_str(written)
        hf = HFTokenizer.from_str(json.dumps(spec)) if prefixed else hf_prompt  # (one where none is added)

        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        for tokenizer in {id(hf): hf, id(hf_prompt): hf_prompt}.values():
            _add_config_tokens(tokenizer, config.get("added_tokens_decoder", {}), config_path)
        # As transformers: template files (chat_template.jinja = "default", and one per name
        # in additional_chat_templates/) take priority over tokenizer_config.json's
        # chat_template (one string, or [{"name": "default", "template": ...}, ...]).
        templates = {}
        if (folder / "chat_template.jinja").is_file():
            templates["default"] = (folder / "chat_template.jinja").read_text(encoding="utf-8")
        if (folder / "additional_chat_templates").is_dir():
            for file in sorted((folder / "additional_chat_templates").glob("*.jinja")):
                templates[file.stem] = file.read_text(encoding="utf-8")
        if not templates:
            listed = config.get("chat_template")
            if isinstance(listed, list):
                templates = {t["name"]: t["template"] for t in listed}
            elif listed is not None:
                templates = {"default": listed}
        template = templates.pop("default", None)
        # Older checkpoints name their bos/eos/... in special_tokens_map.json; transformers
        # reads it after tokenizer_config.json, so its entries win.
        special_map_path = folder / "special_tokens_map.json"
        special_map = json.loads(special_map_path.read_text(encoding="utf-8")) if special_map_path.is_file() else {}
        template_tokens = {
            k: content
            for source in (config, special_map)
            for k, v in source.items()
            if k.endswith("_token") and (content := _token_content(v)) is not None
        }
        eos = template_tokens.get("eos_token")
        eos_id = hf.token_to_id(eos) if eos is not None else None
        if eos is not None and eos_id is None:
            raise ValueError(f"{config_path}: eos_token {eos!r} is not in the vocabulary")
        if eos_id is None:
            eos_id = _guess_eos(hf, json_path)
        return cls(hf, detect_family(spec), eos_id, template, template_tokens, str(json_path), templates, hf_prompt)

    @classmethod
    def from_sentencepiece(cls, path) -> Tokenizer:
        """Convert a SentencePiece BPE .model (Llama/Mistral style: `▁`, byte fallback).

        Merges come from the piece scores: sentencepiece joins the adjacent pair whose
        union has the highest score, so a merge (left, right) gets its union's score as
        priority; ties go to the longer left part, which reproduces sentencepiece's
        leftmost-first choice inside runs of `▁`.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no SentencePiece model file at {path}")
        pieces: list[tuple[str, float, int]] = []
        trainer: dict[int, int | bytes] = {}
        normalizer: dict[int, int | bytes] = {}
        for number, value in _protobuf_fields(path.read_bytes()):
            if number not in (1, 2, 3):  # ModelProto: pieces, trainer_spec, normalizer_spec
                continue
            if not isinstance(value, bytes):
                raise ValueError(f"{path}: ModelProto field {number} should be a message, got the number {value}")
            message = dict(_protobuf_fields(value))
            if number == 1:  # a piece: piece=1, score=2 (float32), type=3
                score = struct.unpack("<f", _bytes_field(message, 2, b"\0\0\0\0"))[0]
                pieces.append((_bytes_field(message, 1, b"").decode(), score, _int_field(message, 3, 1)))
            elif number == 2:
                trainer = message
            else:
                normalizer = message
        model_type = _int_field(trainer, 3, 1)  # TrainerSpec.model_type, 2 = BPE (1 = unigram, the default)
        if model_type != 2:
            raise ValueError(f"{path}: only SentencePiece BPE models are supported (model_type={model_type})")
        norm_name = _bytes_field(normalizer, 1, b"identity").decode()
        remove_extra_whitespaces = _int_field(normalizer, 4, 1)
        if norm_name != "identity" or remove_extra_whitespaces:
            raise ValueError(
                f"{path}: SentencePiece normalizer {norm_name!r} (remove_extra_whitespaces="
                f"{bool(remove_extra_whitespaces)}) is not supported; only 'identity' is"
            )

        NORMAL, UNKNOWN, CONTROL, USER_DEFINED = 1, 2, 3, 4  # SentencePiece.Type
        vocab = {piece: i for i, (piece, _, _) in enumerate(pieces)}
        ranked = []
        for piece, score, kind in pieces:
            if kind != NORMAL:
                continue
            for cut in range(1, len(piece)):
                left, right = piece[:cut], piece[cut:]
                if left in vocab and right in vocab:
                    ranked.append((-score, -len(left), vocab[left], left, right))
        ranked.sort()
        unk = next((p for p, _, kind in pieces if kind == UNKNOWN), None)
        hf = HFTokenizer(
            models.BPE(
                vocab,
                [(left, right) for *_, left, right in ranked],
                byte_fallback=bool(_int_field(trainer, 35, 0)),
                unk_token=unk,
                fuse_unk=True,
            )
        )
        hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE_MARK, prepend_scheme="never", split=False)
        hf.decoder = decoders.Sequence([decoders.Replace(SPACE_MARK, " "), decoders.ByteFallback(), decoders.Fuse()])
        hf.add_special_tokens(
            [AddedToken(p, special=True, normalized=False) for p, _, kind in pieces if kind in (UNKNOWN, CONTROL)]
        )
        hf.add_tokens([AddedToken(p, special=False, normalized=False) for p, _, kind in pieces if kind == USER_DEFINED])
        # TrainerSpec bos_id/eos_id are int32; -1 ("none") arrives as a 64-bit varint.
        bos_id, eos_id = (
            v - (1 << 64) if v >= 1 << 63 else v for v in (_int_field(trainer, 41, 1), _int_field(trainer, 42, 2))
        )
        if eos_id < 0:
            raise ValueError(f"{path}: this SentencePiece model has no end-of-sequence piece")
        template_tokens = {"eos_token": pieces[eos_id][0]}
        if bos_id >= 0:  # encode(..., add_special_tokens=True) prepends BOS, like sentencepiece
            template_tokens["bos_token"] = pieces[bos_id][0]
            hf.post_processor = processors.TemplateProcessing(
                single=f"{pieces[bos_id][0]} $A", special_tokens=[(pieces[bos_id][0], bos_id)]
            )
        hf_prompt = None
        if _int_field(normalizer, 3, 1):  # NormalizerSpec.add_dummy_prefix: "Hello" is "▁Hello"
            hf_prompt = HFTokenizer.from_str(hf.to_str())
            hf_prompt.normalizer = normalizers.Prepend(SPACE_MARK)  # (also before a leading space, as sentencepiece)
        return cls(hf, SENTENCEPIECE, eos_id, None, template_tokens, str(path), hf_prompt=hf_prompt)

    @classmethod
    def from_tekken(cls, path) -> Tokenizer:
        """Convert mistral-common's tekken json (tiktoken-style byte-level BPE).

        Ids 0..n_special-1 are special tokens; regular rank r has id r + n_special. A
        tiktoken merge joins the adjacent pair whose union has the lowest rank, so each
        split (left, right) of a token becomes a Hugging Face merge ranked by that token.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no tekken json at {path}")
        data = json.loads(path.read_text(encoding="utf-8"))
        config = data["config"]
        n_special = config["default_num_special_tokens"]
        n_regular = config["default_vocab_size"] - n_special
        named = [t["token_str"] for t in sorted(data.get("special_tokens") or [], key=lambda t: t["rank"])]
        named = named or list(TEKKEN_DEFAULT_SPECIALS)
        specials = named + [f"<SPECIAL_{i}>" for i in range(len(named), n_special)]

        vocab = {}
        for entry in data["vocab"][:n_regular]:
            raw = base64.b64decode(entry["token_bytes"])
            vocab["".join(BYTE_TO_UNICODE[b] for b in raw)] = entry["rank"] + n_special
        ranked = []
        for piece, token_id in vocab.items():
            for cut in range(1, len(piece)):
                left, right = piece[:cut], piece[cut:]
                if left in vocab and right in vocab:
                    ranked.append((token_id, vocab[left], left, right))
        ranked.sort()
        clash = [s for s in specials if s in vocab]
        if clash:
            raise ValueError(f"{path}: special tokens {clash[:5]} are also regular tokens")
        vocab.update({s: i for i, s in enumerate(specials)})

        hf = HFTokenizer(models.BPE(vocab, [(left, right) for *_, left, right in ranked]))
        hf.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(config["pattern"]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        hf.decoder = decoders.ByteLevel()
        hf.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        hf.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", specials.index("<s>"))]
        )
        return cls(hf, BYTE_LEVEL, specials.index("</s>"), None, {"bos_token": "<s>", "eos_token": "</s>"}, str(path))

    def widen_to(self, vocab_size: int) -> None:
        """Make every id below ``vocab_size`` (a model's logits width) a valid id that spells
        nothing, as an unused id does. Checkpoints pad their embedding past the vocabulary
        (Qwen2: 151,936 rows for 151,665 tokens) and a model can sample a padded id, which
        transformers' generate emits and decodes as nothing. Recomputes the fingerprint."""
        if vocab_size > self.vocab_size:
            self.token_bytes.extend([None] * (vocab_size - self.vocab_size))
            self.vocab_size = vocab_size
            self.fingerprint = self._compute_fingerprint()

    # -------------------------------------------------------------------- text <-> ids
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; with ``add_special_tokens`` the tokenizer's BOS etc. too."""
        return self.hf.encode(text, add_special_tokens=add_special_tokens).ids

    @functools.cached_property
    def prompt_prefix(self) -> list[int]:
        """The ids the tokenizer's post-processor puts before a text's own (Llama 3's
        <|begin_of_text|>, Mistral's <s>; none for the bundled model)."""
        full, own = (self.hf_prompt.encode("a", add_special_tokens=flag).ids for flag in (True, False))
        start = next((i for i in range(len(full)) if full[i : i + len(own)] == own), 0)
        return full[:start]  # (what the post-processor appends, an EOS, is left out)

    def encode_prompt(self, text: str) -> list[int]:
        """A raw-text prompt's ids: ``prompt_prefix`` + the text's ids as the checkpoint's
        tokenizer writes them (its dummy prefix `▁` too: decision 1), what transformers'
        ``tokenizer(text)`` gives (and SGLang and vLLM send the model), except that a prefix the
        text already spells (a template rendered by hand) is not doubled, and nothing the
        post-processor would append (an EOS) ends the prompt. Without the BOS a model trained
        with it answers worse; a chat's BOS comes from its template (`encode_chat`)."""
        ids, prefix = self._as_written(text), self.prompt_prefix
        return ids if ids[: len(prefix)] == prefix else prefix + ids

    def _as_written(self, text: str) -> list[int]:
        """``text``'s ids as the checkpoint's tokenizer writes them, dummy prefix and all, with
        nothing its post-processor adds: a chat's (`encode_chat`), a raw prompt's after its prefix."""
        return self.hf_prompt.encode(text, add_special_tokens=False).ids

    @functools.cached_property
    def _prefix_after_special(self) -> bool:
        """Whether the checkpoint's tokenizer gives the text after a special token its dummy
        prefix too (Llama 2's `Prepend` normalizer: `<s>▁[INST]`), or only the text's start
        (`Metaspace` with prepend_scheme "first")."""
        if self.hf_prompt is self.hf or not self.special_token_ids:
            return False
        special = self._special_text[min(self.special_token_ids)].decode()
        return self._as_written(special + "a")[1:] == self._as_written("a")

    def _encode_prompt_piece(self, text: str, at_start: bool, as_text: bool = False) -> list[int]:
        """The ids of a stretch of a prompt with no special token in it (or, ``as_text``, whose
        special-token strings are text), as the checkpoint's tokenizer writes it at the prompt's
        start or after a special token: Hugging Face encodes each such stretch on its own."""
        hf = self.hf_prompt if at_start or self._prefix_after_special else self.hf
        return (self._text_only_copy(hf) if as_text else hf).encode(text, add_special_tokens=False).ids

    def encode_extended(self, text: str, ids: list[int], more: str) -> list[int]:
        """The ids of ``text + more`` encoded as ``text``'s ids ``ids`` were (by `encode_prompt`,
        `encode_chat` or `encode`), re-encoding only what follows the last special token of ``ids``.

        A tokenizer cuts special tokens out of the text before its BPE runs, so appending
        text cannot change anything up to one. Jump-forward re-encodes prompt + output at
        every jump (chapter 04): after a chat template's last special token that is a few
        tokens, not the whole prompt (which cost 7% of the extraction service's CPU).
        The ids kept are ``ids``' own: for ids that ``encode(text)`` did not produce, only
        the part after the special token is checked. Falls back to encoding everything
        when ``ids`` ends with or has no special token, or when the text after it does not
        re-encode to ``ids``' tail (a tokenizer that treats the start of its input
        differently, a special token that swallows the spaces beside it), the way that
        reproduces ``ids``.
        """
        last = next((i for i in range(len(ids) - 1, -1, -1) if ids[i] in self.special_token_ids), None)
        if last is not None and last < len(ids) - 1:  # a tail to check the re-encoding against
            _, found, tail = text.rpartition(self._special_text[ids[last]].decode())
            if found:
                tail_ids = self._encode_prompt_piece(tail + more, at_start=False)
                if tail_ids[: len(ids) - last - 1] == ids[last + 1 :]:
                    return ids[: last + 1] + tail_ids
        # The whole text again, the way ``ids`` were made: a raw prompt (`encode_prompt`: ids
        # that begin with its prefix), `encode`, or a chat (the checkpoint's own tokenizer).
        prefix = self.prompt_prefix
        ways = [self.encode_prompt] if prefix and ids[: len(prefix)] == prefix else []
        wholes = (way(text + more) for way in [*ways, self.encode, self._as_written])
        first = next(wholes)
        # (none made ``ids``: the first, and the caller sees its prompt changed)
        return next((whole for whole in itertools.chain([first], wholes) if whole[: len(ids)] == ids), first)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """Text of ``ids``: their bytes joined, invalid UTF-8 shown as U+FFFD."""
        return self.decode_bytes(ids, skip_special_tokens).decode("utf-8", errors="replace")

    def decode_bytes(self, ids, skip_special_tokens: bool = True) -> bytes:
        """The exact bytes of ``ids``; special tokens give nothing, or their text if kept."""
        out = []
        for token_id in ids:
            token_id = self._check_id(token_id)
            data = self.token_bytes[token_id]
            if data is None and not skip_special_tokens:
                data = self._special_text.get(token_id)
            if data is not None:
                out.append(data)
        return b"".join(out)

    def normalize(self, text: str) -> str:
        """The text that ``encode(text)``'s tokens spell (see decision 2 in the docstring)."""
        if self.hf.normalizer is not None:
            text = self.hf.normalizer.normalize_str(text)
        if self.family == SENTENCEPIECE:
            text = text.replace(SPACE_MARK, " ")
        return text

    def id_to_token(self, token_id: int) -> str:
        """The raw vocabulary string of ``token_id`` (`Ġthe`, `▁the`, `<0x0A>`), for drawings."""
        token = self.hf.id_to_token(self._check_id(token_id))
        if token is None:
            raise ValueError(f"token id {token_id} is unused in this vocabulary")
        return token

    def apply_chat_template(
        self, messages: list[dict], add_generation_prompt: bool = True, tools: list[dict] | None = None
    ) -> str:
        """Render ``messages`` ([{"role": ..., "content": ...}]) with the jinja chat template.

        Rendered like transformers does: sandboxed, trim_blocks and lstrip_blocks, with
        bos_token/eos_token/... and `raise_exception` available to the template. ``tools``
        (OpenAI tool dicts, ``{"type": "function", "function": {...}}``) is passed to the
        template as ``tools``, which is how chat templates announce them in the system turn.
        A checkpoint with a template named "tool_use" renders with it when ``tools`` is given
        (not None), as transformers does.
        """
        source = self.chat_template
        if tools is not None and "tool_use" in self.named_templates:
            source = self.named_templates["tool_use"]
        if not source:
            others = f" (only templates named {sorted(self.named_templates)})" if self.named_templates else ""
            raise ValueError(
                f"this tokenizer has no chat template ({self.source}): tokenizer_config.json has "
                f"no 'chat_template' and there is no chat_template.jinja{others}; pass a plain prompt instead"
            )
        template = _compiled_template(source)
        return template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, tools=tools, **self.template_tokens
        )

    def encode_chat(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        max_bytes: int | None = None,
    ) -> ChatPrompt:
        """Render ``messages`` with the chat template and encode it; the one way to prompt
        a model with a chat (the server, the CLI, the demo and `lang` all use it).

        Special tokens come only from the template, never from what the messages or tools
        say: a user message containing "<|assistant|>" would otherwise become the real role
        token and forge a turn (prompt injection). vLLM and SGLang servers face the same
        issue with Hugging Face tokenizers. Such text is encoded as ordinary text, its
        bytes. A chat whose texts spell no special token gets exactly
        `encode(apply_chat_template(...))`: the fix costs nothing and changes nothing there.
        Raises ValueError when the template transforms a text that spells a special token
        so that it cannot be located in the prompt (refused rather than guessed).
        Roles are not message text: they choose the template's own markers, and the server
        accepts only system, user, assistant and tool. `max_bytes`: a rendered prompt of more
        UTF-8 bytes raises PromptTooLong before anything is tokenized.
        """
        text = self.apply_chat_template(messages, add_generation_prompt, tools)
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as e:
            raise ValueError(
                f"the prompt is not valid Unicode text (a lone surrogate at character {e.start})"
            ) from None
        if max_bytes is not None and size > max_bytes:
            raise PromptTooLong(size, max_bytes)
        encoding = self.hf_prompt.encode(text, add_special_tokens=False)
        if not any(self._spells_special(s) for s in _message_texts(messages, tools)):
            return ChatPrompt(text, encoding.ids)
        spans = self._message_spans(text, messages, tools, add_generation_prompt)
        return ChatPrompt(text, self._without_forged_specials(text, encoding, spans))

    # ------------------------------------------------------------------------ helpers
    def _spells_special(self, text: str) -> bool:
        """Whether ``text`` contains some special token's string."""
        return self._special_pattern is not None and self._special_pattern.search(text) is not None

    def _message_spans(
        self, text: str, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool
    ) -> list[tuple[int, int]]:
        """Where the texts that spell a special token lie in the rendered ``text``, as
        (start, end) character spans.

        The chat is rendered a second time with each such text wrapped in two private-use
        characters (inside its leading and trailing whitespace, so a template's `trim`
        keeps them); taking the markers out must give ``text`` again, which proves the spans
        are exact. A template that cut or changed a wrapped text fails that check.
        """
        open_mark, close_mark = _unused_marks(text)

        def mark(value):
            if isinstance(value, str) and self._spells_special(value):
                start = len(value) - len(value.lstrip())
                end = len(value.rstrip())
                return value[:start] + open_mark + value[start:end] + close_mark + value[end:]
            if isinstance(value, dict):
                return {mark(k): mark(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [mark(v) for v in value]
            return value

        marked_messages = [{k: v if k == "role" else mark(v) for k, v in m.items()} for m in messages]
        marked = self.apply_chat_template(marked_messages, add_generation_prompt, mark(tools))
        spans: list[tuple[int, int]] = []
        plain: list[str] = []
        start: int | None = None
        balanced = True
        for ch in marked:
            if ch == open_mark:
                balanced = balanced and start is None
                start = len(plain)
            elif ch == close_mark:
                balanced = balanced and start is not None
                if start is not None:
                    spans.append((start, len(plain)))
                start = None
            else:
                plain.append(ch)
        if not balanced or start is not None or "".join(plain) != text:
            raise ValueError(
                "the chat template changes a message text that spells a special token, so it "
                "cannot be kept as plain text; remove the special-token text from the messages"
            )
        return spans

    def _without_forged_specials(self, text: str, encoding, spans: list[tuple[int, int]]) -> list[int]:
        """``encoding``'s ids with every special token that overlaps a message span turned
        back into text.

        Hugging Face cuts special tokens out of the text first and encodes the pieces between
        them separately; so only the pieces next to a forged token change: each stretch
        between two of the template's own special tokens that holds a forged one is encoded
        again as text. Every other id stays exactly as it was.
        """
        ids, offsets = encoding.ids, encoding.offsets
        spans = sorted(spans)  # (disjoint: the messages' texts)
        starts = [s for s, _ in spans]

        def forged(i: int) -> bool:
            """Whether token i is a special token overlapping a span: the one span starting
            last before its end is the only candidate (a scan of every span for every token
            took 29 s for 16,000 messages)."""
            if ids[i] not in self.special_token_ids:
                return False
            begin, end = offsets[i]
            k = bisect.bisect_left(starts, end) - 1
            return k >= 0 and spans[k][1] > begin

        kept = [i for i, t in enumerate(ids) if t in self.special_token_ids and not forged(i)]
        out, prev = [], -1  # prev: index of the last kept special token (-1: the start)
        for nxt in kept + [len(ids)]:
            stretch = range(prev + 1, nxt)
            if any(forged(i) for i in stretch):
                begin = offsets[prev][1] if prev >= 0 else 0
                end = offsets[nxt][0] if nxt < len(ids) else len(text)
                out += self._encode_prompt_piece(text[begin:end], at_start=prev < 0, as_text=True)
            else:
                out += ids[prev + 1 : nxt]
            if nxt < len(ids):
                out.append(ids[nxt])
            prev = nxt
        return out

    def encode_as_text(self, text: str) -> list[int]:
        """``encode(text)`` with special-token strings encoded as ordinary text.

        Uses a copy of the tokenizer with Hugging Face's `encode_special_tokens` switched on,
        made once; the flag is never toggled on `self.hf`, which other threads share.
        """
        return self._text_only_copy(self.hf).encode(text, add_special_tokens=False).ids

    def _text_only_copy(self, hf: HFTokenizer) -> HFTokenizer:
        """A copy of ``hf`` (``self.hf`` or ``self.hf_prompt``) that reads special-token
        strings as text, made once per tokenizer."""
        copy = self._text_only.get(id(hf))
        if copy is None:
            copy = HFTokenizer.from_str(hf.to_str())
            copy.encode_special_tokens = True
            self._text_only[id(hf)] = copy  # two threads racing here each build an equal copy
        return copy

    def _check_id(self, token_id) -> int:
        token_id = int(token_id)
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is out of range: vocab_size is {self.vocab_size}")
        return token_id

    def _compute_fingerprint(self) -> str:
        """sha256 over (family, token_bytes, specials): equal exactly when the byte tables are."""
        h = hashlib.sha256()
        h.update(self.family.encode())
        for data in self.token_bytes:
            if data is None:
                h.update(b"\xff")  # distinct from every length prefix below
            else:
                h.update(len(data).to_bytes(4, "little") + data)
        h.update(b"specials:" + ",".join(map(str, sorted(self.special_token_ids))).encode())
        return h.hexdigest()

    def __repr__(self) -> str:
        return (
            f"Tokenizer(family={self.family!r}, vocab_size={self.vocab_size}, "
            f"eos_token_id={self.eos_token_id}, source={self.source!r})"
        )


def _token_content(value) -> str | None:
    """A tokenizer_config.json token entry: a string or {"content": ...}; else None."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _add_config_tokens(hf: HFTokenizer, added: dict, config_path: Path) -> None:
    """Add tokenizer_config.json's added tokens that tokenizer.json lacks, at their ids."""
    for token_id, entry in sorted(added.items(), key=lambda kv: int(kv[0])):
        if hf.token_to_id(entry["content"]) is not None:
            continue
        token = AddedToken(entry["content"], special=entry.get("special", False), normalized=False)
        (hf.add_special_tokens if token.special else hf.add_tokens)([token])
        if hf.token_to_id(entry["content"]) != int(token_id):
            raise ValueError(
                f"{config_path}: added token {entry['content']!r} should have id "
                f"{token_id} but the vocabulary gives it {hf.token_to_id(entry['content'])}"
            )


def _guess_eos(hf: HFTokenizer, json_path: Path) -> int:
    """The first of EOS_CANDIDATES that is a special token; a clear error if none is."""
    specials = {t.content: i for i, t in hf.get_added_tokens_decoder().items() if t.special}
    for name in EOS_CANDIDATES:
        if name in specials:
            return specials[name]
    raise ValueError(
        f"cannot tell the end-of-sequence token of {json_path}: tokenizer_config.json "
        f"has no eos_token and no special token is one of {list(EOS_CANDIDATES)}"
    )


def _message_texts(messages: list[dict], tools: list[dict] | None) -> Iterable[str]:
    """Every string a chat's messages (all but their roles) and tools hold, keys included."""

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for k, v in value.items():
                yield from strings(k)
                yield from strings(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from strings(v)

    for message in messages:
        yield from strings({k: v for k, v in message.items() if k != "role"})
    yield from strings(tools)


def _unused_marks(text: str) -> tuple[str, str]:
    """Two private-use characters that ``text`` does not contain (markers for _message_spans)."""
    for code in range(0xE000, 0xF8FF, 2):
        if chr(code) not in text and chr(code + 1) not in text:
            return chr(code), chr(code + 1)
    raise ValueError("the prompt uses every private-use character; cannot locate its message texts")


class _GenerationTag(jinja2.ext.Extension):
    """transformers' ``{% generation %}...{% endgeneration %}`` block: it marks the assistant's
    text for training masks (``return_assistant_tokens_mask``); rendered, it is its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller) -> str:
        return caller()


_TEMPLATE_LOCK = threading.Lock()


def _compiled_template(source: str) -> jinja2.Template:
    """A chat template compiled once (rendering a compiled template is thread-safe).

    The lock makes it once even when many chats arrive together: `lru_cache` lets every
    thread that misses compile its own copy, and a burst of 100 chats on a fresh server
    had 40 handler threads compile the same template at once (~43 ms of the GIL each:
    another client's request waited 1.3-2 s)."""
    with _TEMPLATE_LOCK:
        return _compile_template(source)


@functools.lru_cache(maxsize=16)
def _compile_template(source: str) -> jinja2.Template:
    """Compile a chat template (under _TEMPLATE_LOCK only). Compiled per chat, a new sandboxed
    environment and a template compiled to Python made each chat request cost milliseconds of
    the GIL that the scheduler shares, and a few dozen objects in reference cycles: the
    server's full collections freeze what is alive (gc_guard.py), and a soak found compiled
    environments kept for ever that way."""
    return _jinja_env().from_string(source)


def _jinja_env() -> jinja2.Environment:
    """A sandboxed jinja environment configured as chat templates expect."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )

    def raise_exception(message):
        raise jinja2.TemplateError(message)

    # jinja's own tojson escapes <, >, & for HTML; templates want plain JSON, with the
    # options transformers' filter takes (`tojson(ensure_ascii=False)`, `sort_keys=True`...).
    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    # Llama 3.1-3.3 templates date the system turn with it when it is defined (else "26 Jul 2024").
    env.globals["strftime_now"] = lambda format: datetime.datetime.now().strftime(format)
    return env


class IncrementalDetokenizer:
    """Turns a stream of token ids into text, never emitting half a UTF-8 character.

    A character may be split across tokens (byte fallback, byte-level BPE on Chinese or
    emoji), so bytes of an unfinished character wait in Python's incremental UTF-8 decoder
    until the rest arrives. Joining everything `feed` and `flush` return equals
    `tokenizer.decode(all_ids)`.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pieces: list[str] = []

    def feed(self, token_ids: list[int]) -> str:
        """Add ``token_ids``; return only the text they complete."""
        data = self.tokenizer.decode_bytes(token_ids, self.skip_special_tokens)
        piece = self._decoder.decode(data)
        self._pieces.append(piece)
        return piece

    def flush(self) -> str:
        """End of stream: whatever is left (an unfinished character becomes U+FFFD)."""
        piece = self._decoder.decode(b"", final=True)
        self._pieces.append(piece)
        return piece

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return "".join(self._pieces)
