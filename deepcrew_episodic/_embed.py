"""Embedders: text to vectors, for recall by meaning (see docs/recall.md).

An embedder is any object with a ``name`` and ``async embed(texts) -> vectors``, or a plain
callable (async, or sync and then run in a worker thread so that an in-process model never
blocks the event loop). :class:`LiteLLMEmbedder` calls any litellm embedding model.

Everything an embedder answers is checked here (one vector per text, one dimension, finite,
not all zeros) and turned into unit-length float32 rows, so the ranking never sees a bad
vector. Stored vectors are compact: float16, base64, with the embedder's fingerprint and a
digest of the text they were made from (a vector whose episode text changed, or that another
embedder made, is ignored and rebuilt by ``backfill``).

numpy is imported by the functions that need it, never at package import: a memory without an
embedder does not load it.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._episode import Episode
from ._exceptions import ConfigurationError, EmbeddingError, MissingDependencyError
from ._unicode import strip_hidden

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ._redact import Redactor

    Matrix = npt.NDArray[np.float32]

__all__ = ["Embedder", "LiteLLMEmbedder"]

# What is embedded by default: the task, the lesson and the tags. The raw response is left
# out: it is long and mostly about the particular case, and drowns the signal of the task.
DEFAULT_EMBED_FIELDS: tuple[str, ...] = ("query", "reflection", "tags")
EMBEDDABLE_FIELDS: tuple[str, ...] = ("query", "response", "tags", "reflection", "tools_used")
# Texts are cut here before they are sent: small models truncate far earlier anyway, and a
# pasted log must not cost a large model's whole context.
TEXT_CHARS = 2000
MAX_DIMENSION = 16384
# How far above the background level a query's similarity to an episode must be to count as
# meaning the same (see _vectors.py); calibrated on the held-out paraphrase probe with
# all-MiniLM-L6-v2, reported on the first one (docs/benchmarks.md).
SIMILARITY_FLOOR = 0.05
_FORMAT = "v1"


@runtime_checkable
class Embedder(Protocol):
    """What :class:`~deepcrew_episodic.EpisodicMemory` needs of an embedding model.

    ``name`` identifies the model in the log (with the dimension of its vectors): a log whose
    vectors another embedder wrote is refused until ``reembed`` rebuilds them. ``embed``
    returns one vector per text, in order.

    Example::

        class MyEmbedder:
            name = "my-model-v1"

            async def embed(self, texts: list[str]) -> list[list[float]]:
                return await my_client.embed(texts)
    """

    name: str

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


class LiteLLMEmbedder:
    """Any litellm embedding model: ``openai/text-embedding-3-small``,
    ``ollama/nomic-embed-text``, a vLLM or TEI server through ``api_base``, ...

    *litellm_params* go to ``litellm.aembedding`` as they are (``api_base``, ``api_key``,
    ``dimensions``, ``timeout``, ...). litellm is imported on the first call, in a worker thread.

    Example::

        memory = EpisodicMemory(backend, embedder=LiteLLMEmbedder("openai/text-embedding-3-small"))
    """

    def __init__(self, model: str, **litellm_params: Any) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(f"model must be a litellm model name, not {model!r}")
        for key in ("model", "input"):
            if key in litellm_params:
                raise ConfigurationError(f"LiteLLMEmbedder sets {key!r} itself; do not pass it")
        self.model = model
        self.params = litellm_params
        dimensions = litellm_params.get("dimensions")
        # A model asked for fewer dimensions makes other vectors: another name in the log.
        self.name = model if dimensions is None else f"{model}@{dimensions}"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        from ._litellm import load_litellm

        litellm = await load_litellm()
        response = await litellm.aembedding(model=self.model, input=texts, **self.params)
        items = list(_field(response, "data") or [])
        items.sort(key=lambda item: _field(item, "index") or 0)
        return [_field(item, "embedding") for item in items]

    def __repr__(self) -> str:
        return f"LiteLLMEmbedder({self.model!r})"


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


class _FunctionEmbedder:
    """An embedder with its name fixed: a plain callable, or an object's ``embed``. A sync
    one runs in a worker thread, abandoned (not waited for) when the call times out: an
    in-process model that hangs must not hang the memory."""

    def __init__(
        self, function: Callable[..., Any], *, name: str | None = None, original: object = None
    ) -> None:
        self.function = function
        self.original = function if original is None else original
        if name is None:
            name = str(
                getattr(function, "name", None)
                or f"{getattr(function, '__module__', '?')}."
                f"{getattr(function, '__qualname__', '?')}"
            )
        self.name = name
        call = getattr(function, "__call__", None)  # noqa: B004 - an object's async __call__
        self._async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self._async:
            result = self.function(texts)
        else:
            import anyio.to_thread

            result = await anyio.to_thread.run_sync(self.function, texts, abandon_on_cancel=True)
        if inspect.isawaitable(result):
            result = await result
        return result  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<embedder {self.name}>"


def as_embedder(value: object) -> Embedder | None:
    """*value* (``None``, an :class:`Embedder`, or a callable) as an embedder whose ``name``
    is read once, here: the name is recorded in the log, and one that changed later (or that
    raised) would turn every record into a mismatch."""
    if value is None:
        return None
    try:
        embed = getattr(value, "embed", None)
        name = getattr(value, "name", None)
    except Exception as exc:
        raise ConfigurationError(
            f"embedder {type(value).__name__}: reading its name failed ({exc})"
        ) from None
    if callable(embed):
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(
                f"embedder {type(value).__name__} needs a non-empty string attribute 'name' (it "
                f"is recorded in the log, so that vectors of another model are never mixed with "
                f"its own)"
            )
        return _FunctionEmbedder(embed, name=name, original=value)
    if callable(value):
        return _FunctionEmbedder(value)
    raise ConfigurationError(
        f"embedder must be an object with a name and async embed(texts), or a callable taking "
        f"a list of texts, not {type(value).__name__}"
    )


def literal_secrets(embedder: object) -> list[str]:
    """Secrets an embedder was configured with (a ``LiteLLMEmbedder``'s ``api_key``), to take
    out of its error messages whatever their shape."""
    original = getattr(embedder, "original", embedder)
    params = getattr(original, "params", None)
    if not isinstance(params, dict):
        return []
    words = ("key", "token", "secret", "password")
    return [
        value
        for name, value in params.items()
        if isinstance(value, str) and len(value) >= 8 and any(w in name.lower() for w in words)
    ]


def load_numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise MissingDependencyError(
            "recall by meaning needs numpy: pip install 'deepcrew-episodic[embeddings]'"
        ) from None
    return numpy


def embed_text(episode: Episode, fields: Sequence[str], redactor: Redactor | None = None) -> str:
    """The text of *episode* that is embedded: the chosen fields, one per line, each redacted
    with *redactor* before anything cuts it (a deepcrew-ai log, an import or a memory that
    recorded with ``redact=False`` stores text as given: an embedder must not receive it)."""
    parts: list[str] = []
    for name in fields:
        value = getattr(episode, name)
        if isinstance(value, list):
            value = ", ".join(value)
        if value and redactor is not None:
            value = redactor.redact(value)
        if value and (cleaned := clean_text(value)):
            parts.append(cleaned)
    return "\n".join(parts)[:TEXT_CHARS]


def clean_text(text: str) -> str:
    """*text* on one line, without hidden characters, cut to :data:`TEXT_CHARS`."""
    return " ".join(strip_hidden(" ".join(text.split())).split())[:TEXT_CHARS]


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def fingerprint(name: str, dimension: int) -> str:
    """A short tag naming the embedder and dimension that made a stored vector."""
    tag = f"{name}\0{dimension}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(tag, digest_size=6).hexdigest()


def check_vectors(raw: object, count: int, name: str) -> Matrix:
    """*raw* (what an embedder answered for *count* texts) as unit-length float32 rows;
    :class:`EmbeddingError` naming the problem otherwise."""
    np = load_numpy()
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence | np.ndarray):
        raise EmbeddingError(f"embedder {name!r} answered {type(raw).__name__}, not vectors")
    if isinstance(raw, np.ndarray) and (raw.ndim == 0 or raw.dtype.kind not in "iuf"):
        raise EmbeddingError(
            f"embedder {name!r} answered an array of {raw.dtype} and {raw.ndim} dimensions"
        )
    if len(raw) != count:
        raise EmbeddingError(f"embedder {name!r} answered {len(raw)} vectors for {count} texts")
    try:
        # float64 first: a value float32 cannot hold, or a norm that would overflow or
        # underflow in float32, is seen for what it is rather than becoming inf or zero.
        matrix = np.array(raw, dtype=np.float64)
    except Exception as exc:  # anything __float__ may raise, from any object
        raise EmbeddingError(
            f"embedder {name!r} answered vectors that are not lists of real numbers of one "
            f"length ({type(exc).__name__})"
        ) from None
    if matrix.ndim != 2 or not 0 < matrix.shape[1] <= MAX_DIMENSION:
        raise EmbeddingError(f"embedder {name!r} answered vectors of shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise EmbeddingError(f"embedder {name!r} answered a vector holding NaN or infinity")
    scale = np.abs(matrix).max(axis=1, keepdims=True)
    if (scale == 0).any():
        raise EmbeddingError(f"embedder {name!r} answered an all-zero vector")
    matrix = matrix / scale  # no overflow or underflow in the norm, whatever the magnitude
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    return unit.astype(np.float32)  # type: ignore[no-any-return]


def encode_vector(vector: Any, mark: str, text_digest: str) -> str:
    """A stored vector: ``v1|<fingerprint>|<text digest>|<base64 float16>``."""
    np = load_numpy()
    packed = base64.b64encode(np.asarray(vector, dtype="<f2").tobytes()).decode("ascii")
    return f"{_FORMAT}|{mark}|{text_digest}|{packed}"


def decode_vector(raw: str) -> tuple[str, str, Any] | None:
    """``(fingerprint, text digest, float32 unit vector)`` of a stored vector; ``None`` when
    it is not one (it is then ignored and rebuilt by ``backfill``)."""
    parts = raw.split("|")
    if len(parts) != 4 or parts[0] != _FORMAT:
        return None
    np = load_numpy()
    try:
        data = base64.b64decode(parts[3], validate=True)
    except ValueError:
        return None
    if not data or len(data) % 2:
        return None
    vector = np.frombuffer(data, dtype="<f2").astype(np.float32)
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0:
        return None
    return parts[1], parts[2], vector / norm


def encode_identity(name: str, dimension: int) -> str:
    return json.dumps({"name": name, "dimension": dimension}, ensure_ascii=False)


def decode_identity(raw: str | None) -> tuple[str, int] | None:
    """The log's embedder record as ``(name, dimension)``; ``None`` when absent or unreadable
    (the next vector written records it again)."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
        name, dimension = data["name"], data["dimension"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    if not isinstance(name, str) or type(dimension) is not int or dimension <= 0:
        return None
    return name, dimension


class QueryCache:
    """The vectors of the last *size* distinct recall queries (a refinement loop recalls the
    same task on every iteration: one embedding call, not one per iteration)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._items: OrderedDict[str, Any] = OrderedDict()

    def get(self, text: str) -> Any | None:
        vector = self._items.get(text)
        if vector is not None:
            self._items.move_to_end(text)
        return vector

    def put(self, text: str, vector: Any) -> None:
        self._items[text] = vector
        self._items.move_to_end(text)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()


EmbedCall = Callable[[list[str]], Awaitable[Any]]
