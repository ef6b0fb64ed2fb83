"""The codecs from Python: round trips against closed forms, sizes, zero-copy decoding,
error feedback, and errors that are exceptions, never crashes."""
import numpy as np
import pytest
import torch

import hgsim

RNG = np.random.default_rng(20261129)


def fresh(n, dtype=np.float32):
    return RNG.standard_normal(n).astype(dtype)


def test_catalog_lists_every_codec_with_its_parameters():
    catalog = {c["name"]: c for c in hgsim.codecs()}
    assert set(catalog) == {"none", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "int8", "int4",
                            "topk", "randomk", "powersgd"}
    assert catalog["topk"]["parameters"] == ["ratio", "error_feedback"]
    assert catalog["topk"]["error_feedback"] is True
    assert catalog["int8"]["defaults"] == {"codec": "int8", "block": 128,
                                           "stochastic_rounding": False}
    assert catalog["none"]["parameters"] == []


@pytest.mark.parametrize("codec", [c["defaults"] for c in hgsim.codecs()] + ["int8"])
@pytest.mark.parametrize("shape", [(1000,), (64, 48)])
def test_encoded_bytes_is_the_length_of_the_encoding(codec, shape):
    x = fresh(int(np.prod(shape))).reshape(shape)
    for array, dtype in ((x, "fp32"), (x.astype(np.float16), "fp16")):
        encoded = hgsim.encode(codec, array)
        assert encoded.dtype == np.uint8 and encoded.ndim == 1
        assert len(encoded) == hgsim.encoded_bytes(codec, shape, dtype)
        assert hgsim.decode(encoded).shape == (x.size,)


def test_none_is_exact_and_fp16_exact_on_representable_values():
    x = fresh(4099)
    np.testing.assert_array_equal(hgsim.decode(hgsim.encode("none", x)), x)
    representable = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(hgsim.decode(hgsim.encode("fp16", representable)),
                                  representable)
    # fp16 of other values: round to nearest, as numpy does.
    np.testing.assert_array_equal(hgsim.decode(hgsim.encode("fp16", x)), representable)


def test_int8_error_is_at_most_half_a_step_of_its_block():
    x = fresh(128 * 20 + 37) * 3
    y = hgsim.decode(hgsim.encode({"codec": "int8", "block": 128}, x))
    blocks = np.array_split(np.abs(x), np.arange(128, x.size, 128))
    step = np.concatenate([np.full(b.size, b.max() / 127) for b in blocks])
    assert np.all(np.abs(y - x) <= 0.5 * step * (1 + 1e-5) + 1e-7)
    assert not np.array_equal(x, y)  # it did quantise


def test_decode_fills_numpy_and_torch_outputs_in_place():
    x = fresh(3000)
    encoded = hgsim.encode("bf16", x)
    out = np.empty(3000, dtype=np.float32)
    result = hgsim.decode(encoded, out)
    assert result is out
    expected = hgsim.decode(encoded)
    np.testing.assert_array_equal(out, expected)

    tensor = torch.empty(30, 100, dtype=torch.float32)
    pointer = tensor.data_ptr()
    result = hgsim.decode(encoded, tensor)
    assert result is tensor and tensor.data_ptr() == pointer
    np.testing.assert_array_equal(tensor.numpy().reshape(-1), expected)

    # The buffer itself may be a torch uint8 tensor or bytes.
    np.testing.assert_array_equal(hgsim.decode(torch.from_numpy(encoded)), expected)
    np.testing.assert_array_equal(hgsim.decode(bytes(encoded)), expected)


def test_torch_inputs_encode_like_numpy_and_non_contiguous_ones_are_copied():
    x = fresh(64 * 32).reshape(64, 32)
    t = torch.from_numpy(x)
    np.testing.assert_array_equal(hgsim.encode("int8", t), hgsim.encode("int8", x))
    transposed = t.t()
    assert not transposed.is_contiguous()
    np.testing.assert_array_equal(hgsim.encode("none", transposed),
                                  hgsim.encode("none", np.ascontiguousarray(x.T)))
    np.testing.assert_array_equal(hgsim.encode("none", x.T),
                                  hgsim.encode("none", np.ascontiguousarray(x.T)))
    b = torch.from_numpy(x).to(torch.bfloat16)
    assert len(hgsim.encode("bf16", b)) == hgsim.encoded_bytes("bf16", (64, 32), "bf16")


def test_topk_error_feedback_sends_everything_eventually():
    shape = (50, 40)
    codec = hgsim.TensorCodec({"codec": "topk", "ratio": 0.05}, shape)
    assert codec.spec["error_feedback"] is True
    assert codec.encoded_bytes == hgsim.encoded_bytes({"codec": "topk", "ratio": 0.05}, shape)
    inputs = [fresh(2000).reshape(shape) for _ in range(6)]
    decoded = np.zeros(2000, dtype=np.float64)
    for step, x in enumerate(inputs):
        assert codec.step == step
        encoded = codec.encode(x)
        assert len(encoded) == codec.encoded_bytes
        decoded += hgsim.decode(encoded)
    total = np.sum([x.reshape(-1) for x in inputs], axis=0, dtype=np.float64)
    residual = codec.residual
    assert residual.shape == (2000,) and np.abs(residual).max() > 0
    np.testing.assert_allclose(decoded + residual, total, rtol=0, atol=1e-5)
    residual[:] = 0  # a copy: the codec's state is untouched
    assert np.abs(codec.residual).max() > 0


def test_damaged_buffers_and_bad_arguments_raise_codec_errors():
    x = fresh(1000)
    encoded = hgsim.encode("int8", x)
    with pytest.raises(hgsim.CodecError):
        hgsim.decode(encoded[:-1])
    damaged = encoded.copy()
    damaged[:4] = 0  # the magic
    with pytest.raises(hgsim.CodecError):
        hgsim.decode(damaged)
    with pytest.raises(hgsim.CodecError, match="unknown codec 'int7'"):
        hgsim.encode("int7", x)
    with pytest.raises(hgsim.CodecError, match="ratio"):
        hgsim.encode({"codec": "topk", "ratio": 2}, x)
    with pytest.raises(hgsim.CodecError, match="float64"):
        hgsim.encode("int8", x.astype(np.float64))
    with pytest.raises(hgsim.CodecError, match="out has 999 elements; the buffer holds 1000"):
        hgsim.decode(encoded, np.empty(999, dtype=np.float32))
    with pytest.raises(hgsim.CodecError, match="not C-contiguous"):
        hgsim.decode(encoded, np.empty((2000,), dtype=np.float32)[::2])
    with pytest.raises(hgsim.CodecError, match="list"):
        hgsim.encode("int8", [1.0, 2.0])
    codec = hgsim.TensorCodec("int8", (10, 10))
    with pytest.raises(hgsim.CodecError, match="100 elements"):
        codec.encode(fresh(99))
    with pytest.raises(hgsim.CodecError, match="fp16"):
        codec.encode(fresh(100, np.float16))
    with pytest.raises(hgsim.CodecError, match="dtype 'fp64'"):
        hgsim.encoded_bytes("int8", (10,), "fp64")
    # CodecError is an hgsim.Error and a ValueError.
    assert issubclass(hgsim.CodecError, hgsim.Error) and issubclass(hgsim.Error, ValueError)


def test_contiguous_numpy_inputs_are_read_in_place_and_others_copied_once():
    import tracemalloc
    x = fresh(1 << 21)  # 8 MiB
    out_bytes = hgsim.encoded_bytes("none", x.shape)
    tracemalloc.start()
    try:
        hgsim.encode("none", x)
        _, in_place = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        strided = x[::2]
        hgsim.encode("none", strided)
        _, copied = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert in_place < out_bytes * 1.1  # the output only
    # The output (half the size) and one copy of the strided input, not more.
    assert strided.nbytes + out_bytes // 2 <= copied < (strided.nbytes + out_bytes // 2) * 1.1


def test_encode_and_decode_release_the_gil():
    import threading
    import time
    codec = {"codec": "powersgd", "rank": 64}  # some 0.1 s per call: matrix products
    x = fresh(2048 * 4096).reshape(2048, 4096)
    encoded = hgsim.encode(codec, x)
    out = np.empty(x.size, dtype=np.float32)
    calls = []
    done = threading.Event()

    def work():
        for call in (lambda: hgsim.encode(codec, x), lambda: hgsim.decode(encoded, out)) * 2:
            start = time.perf_counter()
            call()
            calls.append(time.perf_counter() - start)
        done.set()

    worker = threading.Thread(target=work)
    last = time.perf_counter()
    gaps = []
    worker.start()
    while not done.is_set():  # runs on while the worker is inside C++, if the GIL is free
        now = time.perf_counter()
        if now - last > 1e-3:  # a call is ~0.1 s: shorter pauses can never count below
            gaps.append(now - last)
        last = now
    worker.join()
    # Holding the GIL would stop this loop for each whole call: pauses of at least half a
    # call adding up to nearly all of the calls' time. A loaded machine pauses it too, but in
    # scheduler slices of milliseconds: pauses that long add up to far less (before, the
    # test asserted the single longest pause, which a loaded scheduler could exceed once).
    long_pauses = sum(g for g in gaps if g >= 0.5 * min(calls))
    assert long_pauses < 0.5 * sum(calls), (long_pauses, calls)
