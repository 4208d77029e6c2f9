"""The GGUF reader: agreement with the `gguf` package on valid files, and one test per check
on malformed ones.

Valid files are compared with `gguf.GGUFReader` (the format's reference reader). Malformed
files are built byte by byte with the small encoder below, written from the GGUF
specification, so each test controls exactly which field lies and where it sits.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import quantize

from cera.errors import InvalidModelFile, ModelNotFound
from cera.formats.gguf import GGUFFile

# -- a byte-level GGUF encoder (from the spec), for files that lie ------------------------


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + u32(vtype) + payload


def kv_u32(key: str, v: int) -> bytes:
    return kv(key, GGUFValueType.UINT32, u32(v))


def kv_str(key: str, s: str) -> bytes:
    return kv(key, GGUFValueType.STRING, gstr(s))


def tinfo(name: str, dims: tuple[int, ...], ggml_type: int, offset: int) -> bytes:
    return gstr(name) + u32(len(dims)) + b"".join(u64(d) for d in dims) + u32(ggml_type) + u64(offset)


def gguf_bytes(
    kvs=(),
    tensors=(),
    data: bytes = b"",
    *,
    magic=b"GGUF",
    version=3,
    n_tensors=None,
    n_kv=None,
    alignment=32,
) -> bytes:
    head = magic + u32(version)
    head += u64(len(tensors) if n_tensors is None else n_tensors)
    head += u64(len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(tensors)
    pad = -len(head) % alignment
    return head + b"\0" * pad + data


F32 = GGMLQuantizationType.F32
ARCH = kv_str("general.architecture", "test")
HEADER = 4 + 4 + 8 + 8  # magic, version, tensor count, kv count


@pytest.fixture
def write(tmp_path):
    def _write(content: bytes, name="m.gguf"):
        p = tmp_path / name
        p.write_bytes(content)
        return p

    return _write


def invalid(path, offset, *fragments):
    """Open `path`, expecting InvalidModelFile at `offset` with every fragment in the reason."""
    with pytest.raises(InvalidModelFile) as info:
        GGUFFile(path)
    e = info.value
    assert e.path == str(path)
    assert e.offset == offset, (e.offset, e.reason)
    for f in fragments:
        assert f in e.reason, (f, e.reason)
    assert str(path) in str(e) and f"at byte {offset}" in str(e)
    return e


# -- valid files, against the reference reader -----------------------------------------------


def reference_metadata(reader: GGUFReader) -> dict:
    out = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        out[name] = field.contents()
    return out


def as_plain(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, list):
        return [as_plain(x) for x in v]
    return v


def assert_same_as_reference(path):
    reader = GGUFReader(path)
    with GGUFFile(path) as g:
        ref = reference_metadata(reader)
        assert list(g.metadata) == list(ref)
        for key, value in ref.items():
            got = as_plain(g.metadata[key])
            if isinstance(value, float):
                assert got == pytest.approx(value, rel=1e-7), key
            else:
                assert got == as_plain(value), key
        assert [t.name for t in reader.tensors] == list(g.tensors)
        for t in reader.tensors:
            info = g.tensors[t.name]
            assert info.shape == tuple(int(d) for d in t.shape), t.name
            assert info.ggml_type == t.tensor_type, t.name
            assert info.offset == t.data_offset, t.name
            assert info.nbytes == t.n_bytes, t.name
            assert info.n_elements == t.n_elements, t.name
            assert g.tensor_data(t.name).tobytes() == t.data.tobytes(), t.name
        assert g.parameter_count() == sum(int(t.n_elements) for t in reader.tensors)
        return g.metadata, dict(g.tensors)


def write_synthetic(path, alignment: int | None = None) -> None:
    """A small valid GGUF with every value type and several tensor types."""
    rng = np.random.default_rng(1)
    w = GGUFWriter(str(path), "synth")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 0.1)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo ✓")
    w.add_string("t.empty", "")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, 1.25])
    w.add_array("t.arr_str", ["a", "", "ünï"])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.arr_empty", [])
    w.add_tensor("f32", rng.standard_normal((3, 8)).astype(np.float32))
    w.add_tensor("f16", rng.standard_normal((2, 16)).astype(np.float16))
    w.add_tensor("i32", np.arange(5, dtype=np.int32))
    w.add_tensor("vec", rng.standard_normal(7).astype(np.float32))
    for qt in (GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1):
        w.add_tensor(qt.name.lower(), quantize(rng.standard_normal((4, 64)).astype(np.float32), qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("alignment", [None, 64, 1])
def test_synthetic_file_matches_reference_reader(tmp_path, alignment):
    path = tmp_path / "synth.gguf"
    write_synthetic(path, alignment)
    meta, tensors = assert_same_as_reference(path)
    # Independent of both readers: the values the writer was given.
    assert meta["t.u64"] == 2**63 + 5 and meta["t.i8"] == -100 and meta["t.str"] == "héllo ✓"
    assert meta["t.arr_str"] == ["a", "", "ünï"] and meta["t.arr_bool"].tolist() == [True, False, True]
    assert tensors["f32"].shape == (8, 3) and tensors["f32"].numpy_shape == (3, 8)
    assert tensors["q8_0"].nbytes == 4 * 2 * 34  # 4 rows of 64 values: 2 blocks of 34 bytes each
    assert tensors["q4_1"].nbytes == 4 * 2 * 20


def test_tensor_views_are_read_only_and_shaped(tmp_path):
    path = tmp_path / "synth.gguf"
    write_synthetic(path)
    with GGUFFile(path) as g:
        f16 = g.tensor_data("f16")
        assert f16.dtype == np.float16 and f16.shape == (2, 16) and not f16.flags.writeable
        q = g.tensor_data("q4_0")
        assert q.dtype == np.uint8 and q.shape == (4, 2 * 18)
        assert g.architecture == "synth"


def test_smollm2_matches_reference_reader(smollm2_path):
    meta, tensors = assert_same_as_reference(smollm2_path)
    assert meta["general.architecture"] == "llama"
    types = [t.type_name for t in tensors.values()]
    assert (len(types), types.count("Q4_1"), types.count("Q8_0"), types.count("F32")) == (272, 210, 1, 61)


# -- one test per check ------------------------------------------------------------------------


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ModelNotFound, match="no such file"):
        GGUFFile(tmp_path / "absent.gguf")
    with pytest.raises(InvalidModelFile, match="is a directory"):
        GGUFFile(tmp_path)


def test_empty_file(write):
    invalid(write(b""), 0, "file is empty")


def test_bad_magic(write):
    invalid(write(gguf_bytes(magic=b"GGML")), 0, "bad magic b'GGML'", "not a GGUF file")
    invalid(write(b"PK\x03\x04" + b"\0" * 40), 0, "bad magic")
    invalid(write(b"GG"), 0, "magic needs 4 bytes")


def test_version_1(write):
    invalid(write(gguf_bytes(version=1)), 4, "GGUF version 1 is not supported")


def test_big_endian(write):
    data = bytearray(gguf_bytes())
    data[4:8] = struct.pack(">I", 3)
    invalid(write(bytes(data)), 4, "big-endian")


def test_unknown_version(write):
    invalid(write(gguf_bytes(version=99)), 4, "unsupported GGUF version 99")


@pytest.mark.parametrize("cut, offset, what", [(6, 4, "version"), (12, 8, "tensor count"), (20, 16, "metadata key count")])
def test_truncated_header(write, cut, offset, what):
    invalid(write(gguf_bytes()[:cut]), offset, f"{what} needs")


def test_truncated_inside_metadata(write):
    # Cut inside the last value: the error names the key and where its value starts.
    body = gguf_bytes([ARCH, kv_u32("a.b", 7)], alignment=1)
    invalid(write(body[:-2]), len(body) - 4, "value of 'a.b' needs 4 bytes but only 2 remain")


def test_key_length_past_end(write):
    bad = u64(2**40) + b"general.architecture"
    invalid(write(gguf_bytes([bad + u32(8) + gstr("x")])), HEADER, "metadata key claims 1099511627776 bytes")


def test_string_value_length_past_end(write):
    at = HEADER + len(gstr("k")) + 4
    invalid(write(gguf_bytes([kv("k", GGUFValueType.STRING, u64(2**63) + b"abc")])), at, "value of 'k' claims")


def test_string_in_array_length_past_end(write):
    payload = u32(GGUFValueType.STRING) + u64(2) + gstr("ok") + u64(2**50)
    at = HEADER + len(gstr("tok")) + 4 + 4 + 8 + len(gstr("ok"))
    invalid(write(gguf_bytes([kv("tok", GGUFValueType.ARRAY, payload)])), at, "element 1 of 'tok' claims")


@pytest.mark.parametrize("field", ["n_tensors", "n_kv"])
@pytest.mark.parametrize("count", [2**64 - 1, 2**32, 1000])
def test_counts_larger_than_the_file(write, field, count):
    kwargs = {field: count}
    at = 8 if field == "n_tensors" else 16
    what = "tensor count" if field == "n_tensors" else "metadata key count"
    invalid(write(gguf_bytes([ARCH], **kwargs)), at, f"{what} is {count}, which cannot fit")


def test_array_count_larger_than_the_file(write):
    for etype in (GGUFValueType.UINT8, GGUFValueType.FLOAT64, GGUFValueType.STRING, GGUFValueType.ARRAY):
        payload = u32(etype) + u64(2**61) + b"\0" * 16
        at = HEADER + len(gstr("arr")) + 4 + 4
        invalid(write(gguf_bytes([kv("arr", GGUFValueType.ARRAY, payload)])), at, "element count of 'arr' is 2305843009213693952")


def test_tensor_data_past_end(write):
    # 8 F32 values = 32 bytes of data, but only 16 present.
    t = tinfo("w", (8,), F32, 0)
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 16)), HEADER + len(ARCH), "tensor 'w' data (32 bytes at", "runs past the end")
    # An offset far beyond the file.
    t = tinfo("w", (8,), F32, 2**40)
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 32)), HEADER + len(ARCH), "runs past the end")


def test_offset_near_two_to_the_64_does_not_wrap(write):
    t = tinfo("w", (8,), F32, 2**64 - 32)
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 32)), HEADER + len(ARCH), "runs past the end")


def test_unknown_value_type(write):
    invalid(write(gguf_bytes([kv("k", 99, u32(1))])), HEADER + len(gstr("k")), "type of 'k' is unknown value type id 99")


def test_unknown_array_element_type(write):
    at = HEADER + len(gstr("k")) + 4
    invalid(write(gguf_bytes([kv("k", GGUFValueType.ARRAY, u32(77) + u64(0))])), at, "element type of 'k' is unknown value type id 77")


@pytest.mark.parametrize("type_id", [4, 5, 1000, 2**32 - 1])  # 4 and 5 were Q4_2/Q4_3, removed from the format
def test_unknown_tensor_type(write, type_id):
    t = tinfo("w", (32,), type_id, 0)
    at = HEADER + len(ARCH) + len(gstr("w")) + 4 + 8
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 64)), at, f"tensor 'w' has unknown GGML type id {type_id}")


def test_unaligned_offset(write):
    t = tinfo("w", (4,), F32, 3)
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 64)), HEADER + len(ARCH), "data offset 3 is not aligned to 32")
    align = kv_u32("general.alignment", 8)
    t = tinfo("w", (4,), F32, 12)
    invalid(write(gguf_bytes([align], [t], b"\0" * 64, alignment=8)), HEADER + len(align), "not aligned to 8")


@pytest.mark.parametrize("value", [48, 0, 3])
def test_alignment_not_a_power_of_two(write, value):
    invalid(write(gguf_bytes([ARCH, kv_u32("general.alignment", value)])), HEADER + len(ARCH), f"general.alignment {value} is not a power of two")


def test_alignment_of_the_wrong_type(write):
    invalid(write(gguf_bytes([kv_str("general.alignment", "32")])), HEADER, "general.alignment '32' is not a power of two")


def test_duplicate_key(write):
    second = HEADER + len(ARCH)
    invalid(write(gguf_bytes([ARCH, ARCH])), second, "duplicate metadata key 'general.architecture'")


def test_duplicate_tensor(write):
    t = tinfo("w", (8,), F32, 0)
    invalid(write(gguf_bytes([ARCH], [t, t], b"\0" * 32)), HEADER + len(ARCH) + len(t), "duplicate tensor name 'w'")


def test_too_many_dims(write):
    t = tinfo("w", (1, 1, 1, 1, 1), F32, 0)
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 32)), HEADER + len(ARCH), "tensor 'w' has 5 dimensions (at most 4 allowed)")


def test_row_not_a_multiple_of_the_block_size(write):
    t = tinfo("w", (31, 2), GGMLQuantizationType.Q8_0, 0)
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 128)), HEADER + len(ARCH), "type Q8_0 has row length 31, not a multiple of its block size 32")
    t = tinfo("s", (), GGMLQuantizationType.Q4_K, 0)
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 256)), HEADER + len(ARCH), "type Q4_K has row length 1")


def test_dimensions_too_large_for_the_file(write):
    t = tinfo("w", (2**62, 2**62), F32, 0)
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 32)), HEADER + len(ARCH), "cannot fit in a")
    # A zero dimension makes the tensor empty, but must not let absurd ones through.
    t = tinfo("z", (0, 2**63 + 1), F32, 0)
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 32)), HEADER + len(ARCH), "cannot fit in a")


def test_empty_tensor_is_valid(write):
    t = tinfo("z", (0, 4), F32, 0)
    with GGUFFile(write(gguf_bytes([ARCH], [t]))) as g:
        assert g.tensors["z"].nbytes == 0 and g.tensor_data("z").shape == (4, 0)


def test_invalid_utf8_key_and_tensor_name(write):
    invalid(write(gguf_bytes([kv(b"bad\xff", GGUFValueType.UINT32, u32(1))])), HEADER, "metadata key is not valid UTF-8")
    t = gstr(b"\xc3") + u32(1) + u64(4) + u32(F32) + u64(0)
    invalid(write(gguf_bytes([ARCH], [t], b"\0" * 16)), HEADER + len(ARCH), "tensor name is not valid UTF-8")


def test_arrays_nested_too_deep(write):
    payload = b""
    for _ in range(6):
        payload += u32(GGUFValueType.ARRAY) + u64(1)
    payload += u32(GGUFValueType.UINT8) + u64(0)
    # Fails where the fifth level starts: after the key, its type, and four (type, count) pairs.
    at = HEADER + len(gstr("deep")) + 4 + 4 * 12
    invalid(write(gguf_bytes([kv("deep", GGUFValueType.ARRAY, payload)])), at, "'deep' nests arrays deeper than 4")


def test_nested_arrays_within_the_limit_parse(write):
    inner = u32(GGUFValueType.INT32) + u64(2) + struct.pack("<ii", 5, -6)
    payload = u32(GGUFValueType.ARRAY) + u64(2) + inner + inner
    with GGUFFile(write(gguf_bytes([kv("nest", GGUFValueType.ARRAY, payload)]))) as g:
        assert [a.tolist() for a in g.metadata["nest"]] == [[5, -6], [5, -6]]


def test_missing_architecture_is_reported_when_asked(write):
    with GGUFFile(write(gguf_bytes([kv_u32("x", 1)]))) as g:
        with pytest.raises(InvalidModelFile, match="no general.architecture"):
            g.architecture


def test_many_tensors_parse_in_linear_time(write):
    """A hostile file with many small tensor entries must not make the parser quadratic.

    Not a speed assertion: a quadratic duplicate check took hours on this input; the bound
    here only separates "finishes" from "hangs".
    """
    import time

    n = 100_000
    infos = [tinfo(f"t{i}", (0,), F32, 0) for i in range(n)]
    path = write(gguf_bytes([ARCH], infos))
    start = time.monotonic()
    with GGUFFile(path) as g:
        assert len(g.tensors) == n
    assert time.monotonic() - start < 120
