"""The header of a checkpoint file, checked before anything else of the file is read.

A checkpoint comes from disk: a file the user names to ``/load``, or an entry of the disk
prefix cache that other processes share. Its header is checked field by field against the
schema `cera.formats.checkpoint` writes (types, ranges, arrays laid out back to back over exactly
the payload), and against the session it is meant for (the arrays' shapes and types are
the ones that session's state holds, the tokens fill exactly the positions, and fit its
context) before the payload is read. So a crafted header is a `CheckpointError` naming
the field, never another exception, and the bytes read are bounded by what the session
could hold, not by what the file claims.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import CeraError

MAX_TOKEN_ID = 2**31 - 1
MAX_LOGITS = 2**24  # entries of a kept output row (vocabularies are at most a few hundred thousand)


class CheckpointError(CeraError):
    """A checkpoint file is damaged, from another model, precision or format version."""


def _fail(path, field: str, why: str):
    raise CheckpointError(f"{path}: the checkpoint's header is not valid: {field} {why}; the file cannot be restored")


def _int(value, path, field: str, lo: int = 0, hi: int = 2**62) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        _fail(path, field, f"should be an integer in [{lo}, {hi}], not {str(value)[:60]!r}")
    return value


def _ints(value, path, field: str) -> list[int]:
    if not isinstance(value, list):
        _fail(path, field, f"should be a list of token ids, not {type(value).__name__}")
    for v in value:
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_TOKEN_ID:
            _fail(path, field, f"holds {str(v)[:60]!r}, which is not a token id")
    return value


def _dtype(value, path, field: str) -> np.dtype:
    try:
        dt = np.dtype(value) if isinstance(value, str) and len(value) <= 8 else None
    except TypeError:
        dt = None
    if dt is None or dt.kind not in "iuf" or dt.itemsize > 8 or dt.byteorder == ">" or dt.shape:
        _fail(path, field, f"names {str(value)[:40]!r}, which is not a numeric array type")
    return dt


def validate(header, path, payload_bytes: int) -> dict:
    """``header`` if it is the header `cera.formats.checkpoint` writes, with its arrays covering
    exactly ``payload_bytes``; else `CheckpointError` naming the field."""
    if not isinstance(header, dict):
        _fail(path, "the header", f"should be a JSON object, not {type(header).__name__}")
    _int(header.get("format"), path, "format", 1, 1 << 16)
    for key in ("model", "kv_type"):
        if not isinstance(header.get(key), str):
            _fail(path, key, f"should be a string, not {type(header.get(key)).__name__}")
    if header.get("model_name") is not None and not isinstance(header["model_name"], str):
        _fail(path, "model_name", "should be a string")
    n_ctx = _int(header.get("n_ctx", 0), path, "n_ctx", 0, 2**31)
    n_filled = _int(header.get("n_filled"), path, "n_filled", 0, 2**31)
    layout = header.get("layout")
    if not isinstance(layout, list) or not all(
        isinstance(item, list) and item and isinstance(item[0], str)
        and all(x is None or (isinstance(x, int) and not isinstance(x, bool)) for x in item[1:])
        for item in layout
    ):  # fmt: skip
        _fail(path, "layout", "should be a list of [kind, sizes...] lists (a size may be null)")
    tokens = _ints(header.get("tokens"), path, "tokens")
    pending = _ints(header.get("pending", []), path, "pending")
    if len(tokens) != n_filled:
        _fail(path, "tokens", f"lists {len(tokens)} tokens, but the state holds {n_filled} filled positions")
    if n_ctx and len(tokens) + len(pending) > n_ctx:
        _fail(path, "tokens", f"list {len(tokens) + len(pending)} tokens for a context of {n_ctx}")
    if header.get("last_argmax") is not None:
        _int(header["last_argmax"], path, "last_argmax", 0, MAX_TOKEN_ID)
    extra = header.get("extra", {})
    if not isinstance(extra, dict):
        _fail(path, "extra", f"should be an object, not {type(extra).__name__}")
    arrays = header.get("arrays")
    if not isinstance(arrays, list):
        _fail(path, "arrays", "should be a list")
    offset, names = 0, set()
    for i, e in enumerate(arrays):
        where = f"arrays[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or e["name"] in names:
            _fail(path, where, "should be an object with a name of its own")
        names.add(e["name"])
        dt = _dtype(e.get("dtype"), path, where + ".dtype")
        shape = e.get("shape")
        if not isinstance(shape, list) or len(shape) > 6:
            _fail(path, where + ".shape", "should be a list of at most 6 sizes")
        for d in shape:
            _int(d, path, where + ".shape", 0, 2**40)
        nbytes = math.prod(shape) * dt.itemsize
        if _int(e.get("nbytes"), path, where + ".nbytes") != nbytes:
            _fail(path, where + ".nbytes", f"is {e['nbytes']}, but its shape and type make {nbytes}")
        if _int(e.get("offset"), path, where + ".offset") != offset:
            _fail(path, where + ".offset", f"is {e['offset']}; the arrays lie back to back, so it should be {offset}")
        offset += nbytes
    if offset != payload_bytes:
        _fail(path, "arrays", f"cover {offset} bytes, but the file holds {payload_bytes} bytes of them")
    if "positions" not in names:
        _fail(path, "arrays", "lack the positions")
    return header


def expected_arrays(state, slot: int, n_filled: int) -> dict[str, tuple[tuple | None, np.dtype]]:
    """name -> (shape, dtype) of the arrays a snapshot of ``state`` with ``n_filled`` cells
    holds (shape None where only the trailing sizes are fixed: cross-attention caches)."""
    out = {"positions": ((n_filled,), state.pos.dtype)}
    for i, d in enumerate(state.decls):
        if d.kind == "kv":
            k, v = state.k[i], state.v[i]
            cells = min(n_filled, k.shape[2])
            out[f"{i}.a"] = ((k.shape[1], cells) + k.shape[3:], k.dtype)
            out[f"{i}.b"] = ((v.shape[1], cells) + v.shape[3:], v.dtype)
        elif d.kind == "conv":
            a = state.conv_state[i]
            out[f"{i}.a"] = (a.shape[1:], a.dtype)
        elif d.kind == "ssm":
            a = state.ssm_state[i]
            out[f"{i}.a"] = (a.shape[1:], a.dtype)
        else:
            out[f"{i}.a"] = (None, state.cross_k[i].dtype)
            out[f"{i}.b"] = (None, state.cross_v[i].dtype)
    return out


def check_fit(header: dict, state, path) -> None:
    """Refuse (CheckpointError) a validated header whose arrays are not the ones this
    state's snapshot holds, or whose tokens do not fit its context."""
    n = header["n_filled"]
    if n > state.n_ctx or len(header["tokens"]) + len(header.get("pending", [])) > state.n_ctx:
        raise CheckpointError(
            f"{path} holds {len(header['tokens']) + len(header.get('pending', []))} tokens; this session's context "
            f"is {state.n_ctx}: create the session with a larger n_ctx"
        )
    want = expected_arrays(state, 0, n)
    got = {e["name"]: e for e in header["arrays"]}
    for name, (shape, dtype) in want.items():
        e = got.get(name)
        if e is None:
            raise CheckpointError(f"{path}: the array {name} of the state is missing")
        if np.dtype(e["dtype"]) != dtype:
            raise CheckpointError(f"{path}: the array {name} is {e['dtype']}; this session's state keeps {dtype.str}")
        if shape is not None and tuple(e["shape"]) != tuple(shape):
            raise CheckpointError(f"{path}: the array {name} has shape {e['shape']}; this session's state needs {list(shape)}")
        if shape is None:
            i = int(name.split(".")[0])
            full = (state.cross_k if name.endswith(".a") else state.cross_v)[i].shape
            if len(e["shape"]) != len(full) - 1 or e["shape"][0] > full[1] or tuple(e["shape"][1:]) != full[2:]:
                raise CheckpointError(f"{path}: the array {name} has shape {e['shape']}, which does not fit this state")
    optional = {}  # a TurboQuant cache's key offsets (older files lack them)
    for i, d in enumerate(state.decls):
        if d.kind == "kv" and getattr(state, "key_offsets", None) is not None:
            optional[f"{i}.key_offset"] = (d.n_kv_heads, d.k_dim)
    for name, shape in optional.items():
        e = got.get(name)
        if e is not None and (tuple(e["shape"]) != shape or np.dtype(e["dtype"]) != np.float32):
            raise CheckpointError(f"{path}: the array {name} should be float32 of shape {list(shape)}")
    extra = set(got) - set(want) - set(optional) - {"last.logits"}
    if extra:
        raise CheckpointError(f"{path}: the checkpoint holds arrays this state does not have ({', '.join(sorted(extra))})")
    if "last.logits" in got:
        e = got["last.logits"]
        if len(e["shape"]) != 1 or e["shape"][0] > MAX_LOGITS or np.dtype(e["dtype"]) != np.float32:
            raise CheckpointError(f"{path}: the kept output (last.logits) should be one row of float32")


def check_positions(positions: np.ndarray, state, path) -> None:
    """The positions of the filled cells: increasing, each in [0, n_ctx) (the masks and
    rotary tables of the state are sized by the context)."""
    if len(positions) and (positions[0] < 0 or positions[-1] >= state.n_ctx or np.any(np.diff(positions) <= 0)):
        raise CheckpointError(
            f"{path}: the positions of its tokens are not increasing within this session's context of {state.n_ctx}"
        )
