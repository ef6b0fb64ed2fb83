"""Hostile arguments to the Python module: only hgsim.Error / hgsim.CodecError
come out, never a crash, a bare RuntimeError, or a second copy of the caller's script."""
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hgsim

TINY = {
    "name": "tiny",
    "model": {"name": "tiny", "layers": 4, "hidden": 256, "heads": 4, "vocab": 1000},
    "training": {"global_batch": 8, "seq_len": 128, "precision": "bf16"},
    "clusters": [
        {"name": "east", "gpu": "A100-80GB-SXM", "nodes": 1, "gpus_per_node": 2,
         "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
         "nic": {"bandwidth": "200Gbps", "latency": "2us"}},
        {"name": "west", "gpu": "V100-32GB-SXM", "nodes": 1, "gpus_per_node": 2,
         "nvlink": {"bandwidth": "150GB/s", "latency": "1us"},
         "nic": {"bandwidth": "100Gbps", "latency": "2us"}},
    ],
    "wan": [{"between": ["east", "west"], "bandwidth": "10Gbps", "latency": "15ms"}],
    "strategy": {"schedule": "1f1b", "micro_batch": 1, "pipelines": [
        {"replicas": 2, "micro_batches": 4, "stages": [
            {"cluster": "east", "layers": 2}, {"cluster": "west", "layers": 2}]}]},
}


def changed(path, value):
    """TINY with one value replaced (path: keys and list indices)."""
    import copy
    s = copy.deepcopy(TINY)
    node = s
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return s


@pytest.mark.parametrize("path,value,message", [
    (("clusters", 0, "gpu"), "", "may not be empty"),
    (("clusters", 1, "name"), "east/n0", "characters hgsim cannot use"),
    (("strategy", "pipelines", 0, "stages", 0, "cluster"), "", "may not be empty"),
    (("wan", 0, "bandwidth"), "1e300Tbps", "outside the range"),
    (("wan", 0, "bandwidth"), "1e-300bps", "outside the range"),
    (("strategy", "pipelines", 0, "replicas"), 2147483647, "GPUs of cluster"),
    (("strategy", "micro_batch"), float("nan"), "a float NaN or infinity cannot be a value"),
    (("wan", 0, "latency"), float("inf"), "a float NaN or infinity cannot be a value"),
    (("name",), "\x1b[31mred", "control character \\x1b"),
    (("clusters", 0, "nodes"), 10**30, "too large"),
    (("wan",), [], "no WAN path"),
])
def test_bad_scenarios_raise_error_with_where_and_what(path, value, message):
    with pytest.raises(hgsim.Error) as e:
        hgsim.simulate(changed(path, value))
    assert message in str(e.value)


def test_special_files_raise_error(tmp_path):
    os.mkfifo(tmp_path / "fifo.yaml")
    for path, message in [("/dev/zero", "character device"),
                          (tmp_path / "fifo.yaml", "FIFO"),
                          (tmp_path, "directory")]:
        with pytest.raises(hgsim.Error) as e:
            hgsim.load_scenario(path)
        assert message in str(e.value)


def test_deep_plan_file_raises_error(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text("[" * 10000 + "]" * 10000)
    with pytest.raises(hgsim.Error) as e:
        hgsim.load_plan(plan)
    assert "plan.json:1:65: error: lists and objects nest more than 64 deep" in str(e.value)


def test_forged_codec_buffers_raise_codec_error():
    header = b"HGCD" + bytes([1, 7, 0, 0]) + struct.pack("<QIIQQ", 1 << 28, 0, 0, 1, 0)
    for buffer in [header + bytes(9), header[:20], b"XXXX" + header[4:], bytes(49)]:
        with pytest.raises(hgsim.CodecError):
            hgsim.decode(buffer)


class ForgedTensor:
    """Looks like a torch tensor to duck typing: data_ptr() names an address nobody owns."""
    device = type("D", (), {"type": "cpu"})()
    dtype = "torch.float32"
    shape = (1 << 20,)

    def data_ptr(self):
        return 16

    def is_contiguous(self):
        return True

    def numel(self):
        return 1 << 20


@pytest.mark.parametrize("array", [ForgedTensor(), object(), "text", [1.0, 2.0], None])
def test_forged_arrays_raise_codec_error(array):
    with pytest.raises(hgsim.CodecError):
        hgsim.encode("int8", array)


def test_internal_failures_are_hgsim_errors_not_runtime_errors():
    # A dict that json cannot carry exactly (a set) is a TypeError from our own message;
    # everything else from C++ is hgsim.Error.
    with pytest.raises(TypeError):
        hgsim.simulate(changed(("name",), {1, 2}))
    with pytest.raises(hgsim.Error) as e:
        hgsim.simulate(changed(("training", "global_batch"), 1e400))
    assert not type(e.value) is RuntimeError


def test_the_simulator_child_never_runs_the_callers_code(tmp_path):
    # The rest of the script must run once, in the caller, whatever the simulation does.
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""
        import hgsim
        scenario = {TINY!r}
        scenario["name"] = "caf\\udce9"  # not UTF-8 once encoded: a failure inside the child
        try:
            hgsim.simulate(scenario)
        except Exception as e:
            print("raised", type(e).__name__)
        hgsim.simulate({TINY!r})
        print("after", flush=True)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=dict(os.environ), timeout=120)
    assert out.stdout.count("after") == 1, out.stdout + out.stderr


def test_paths_with_a_nul_or_empty_raise_error(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: x\n")
    for call in (lambda: hgsim.load_scenario(str(scenario) + "\0garbage"),
                 lambda: hgsim.simulate(TINY, layer_profile=""),
                 lambda: hgsim.simulate(TINY, layer_profile="/tmp/a\0b")):
        with pytest.raises(hgsim.Error) as e:
            call()
        assert "NUL character" in str(e.value) or "an empty path" in str(e.value)


def test_codec_shapes_past_two_to_the_forty_raise_codec_error():
    for shape in ([2**32, 2**32], [2**20, 2**20 + 1], [2, 2**40]):
        with pytest.raises(hgsim.CodecError) as e:
            hgsim.encoded_bytes("int8", shape)
        assert "more than 2^40 elements" in str(e.value)


def _assert_quoted(message, limit=400):
    """A message that repeats input holds no byte a terminal acts on, and stays short."""
    assert "\x1b" not in message and "\x07" not in message, message[:200]
    assert len(message) <= limit, (len(message), message[:200])


@pytest.mark.parametrize("call", [
    lambda a: hgsim.encode("int8\x1b[31m", a),
    lambda a: hgsim.encode("x" * 10**6, a),
    lambda a: hgsim.encode({"codec": "x" * 10**5}, a),
    lambda a: hgsim.encode({"codec": "int8", "\x07" * 40000: 1}, a),
    lambda a: hgsim.TensorCodec("int8\x1b[31m", (4,)),
    lambda a: hgsim.TensorCodec("int8", (4,), "q" * 10**5),
    lambda a: hgsim.encoded_bytes("x" * 10**6, (4,)),
    lambda a: hgsim.encoded_bytes("int8", (4,), "f\x1b" * 1000),
    lambda a: hgsim.encode(type("x\x1b" * 100, (), {})(), a),
], ids=["escape", "megabyte-name", "dict-name", "dict-key", "tensorcodec", "tensorcodec-dtype",
        "encoded-bytes", "encoded-bytes-dtype", "type-name"])
def test_codec_errors_quote_what_they_repeat(call):
    with pytest.raises(hgsim.CodecError) as e:
        call(np.ones(4, np.float32))
    # A 40 000-character key of BEL is shown by its ends, each BEL as \x07.
    _assert_quoted(str(e.value), limit=1200)


def test_codec_names_are_cut_to_sixty_characters():
    with pytest.raises(hgsim.CodecError) as e:
        hgsim.encode("x" * 10**6, np.ones(4, np.float32))
    assert "'" + "x" * 60 + "... (1000000 characters)'" in str(e.value)
    with pytest.raises(hgsim.CodecError) as e:
        hgsim.encode("int8\x1b[31m", np.ones(4, np.float32))
    assert "unknown codec 'int8\\x1b[31m'" in str(e.value)


def test_an_array_past_the_element_limit_is_refused_before_it_is_copied():
    # A broadcast view of one float claims 4 TiB: numpy would try to make it contiguous.
    huge = np.broadcast_to(np.float32(1), (2**40,))
    with pytest.raises(hgsim.CodecError) as e:
        hgsim.encode("int8", huge)
    assert "the array has 1099511627776 elements" in str(e.value)
    assert "HGSIM_MAX_CODEC_ELEMENTS" in str(e.value)
    with pytest.raises(hgsim.CodecError):
        hgsim.TensorCodec("int8", (2**40,)).encode(huge)


@pytest.mark.parametrize("function", ["load_scenario", "resolve", "simulate"])
def test_a_path_that_is_not_utf8_is_a_file_name_not_a_traceback(function, tmp_path):
    # Python reads a file name that is not UTF-8 with surrogateescape ('\udcff' for byte
    # 0xff): it names that file again, and a message shows the byte escaped.
    missing = str(tmp_path) + "/\udcff.yaml"
    with pytest.raises(hgsim.Error) as e:
        getattr(hgsim, function)(missing)
    assert "\\xff.yaml': No such file or directory" in str(e.value)
    _assert_quoted(str(e.value))
    with pytest.raises(hgsim.Error) as e:
        getattr(hgsim, function)(os.fsencode(missing))  # bytes name the same file
    assert "\\xff.yaml'" in str(e.value)
    with pytest.raises(hgsim.Error) as e:
        getattr(hgsim, function)(str(tmp_path) + "/\ud800.yaml")  # not an escaped byte
    assert "cannot be a file name" in str(e.value)


def test_a_scenario_whose_file_name_is_not_utf8_loads(tmp_path):
    import json
    name = os.path.join(os.fsencode(str(tmp_path)), b"s\xff.json")
    with open(name, "w") as f:
        json.dump(TINY, f)
    loaded = hgsim.load_scenario(os.fsdecode(name))
    assert loaded["name"] == "tiny"


def test_simulate_options_are_quoted():
    with pytest.raises(hgsim.Error) as e:
        hgsim.simulate(TINY, fidelity="x\x1b" * 100)
    assert "fidelity is 'full', 'folded' or 'auto', not 'x\\x1b" in str(e.value)
    _assert_quoted(str(e.value))
    with pytest.raises(hgsim.Error) as e:
        hgsim.simulate(TINY, fidelity="\udcff")
    assert "not '\\xff'" in str(e.value)
    with pytest.raises(hgsim.Error) as e:
        hgsim.parse_quantity("10", "q\x1b" * 1000)
    _assert_quoted(str(e.value))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_dicts_json_cannot_write_are_refused_at_their_key():
    circular = changed(("name",), None)
    circular["strategy"]["pipelines"][0]["stages"].append(circular["strategy"])
    with pytest.raises(hgsim.Error, match=r"^circular reference at strategy.pipelines\[0\]"
                                          r"\.stages\[2\]$"):
        hgsim.load_scenario(circular)
    looped = {}
    looped["name"] = looped
    with pytest.raises(hgsim.Error, match="^circular reference at name$"):
        hgsim.load_scenario(looped)
    # The same list twice is not a cycle.
    twice = changed(("name",), "twice")
    twice["extra"] = [twice["wan"], twice["wan"]]
    with pytest.raises(hgsim.Error) as e:
        hgsim.load_scenario(twice)
    assert "circular" not in str(e.value)
    with pytest.raises(TypeError, match=r"^wan\[0\]\.latency: cannot write a ndarray .*tolist"):
        hgsim.load_scenario(changed(("wan", 0, "latency"), np.array([1.0, 2.0])))
    with pytest.raises(TypeError, match=r"^ratio: cannot write a ndarray"):
        hgsim.encoded_bytes({"codec": "topk", "ratio": np.array([0.1, 0.2])}, [10])
    # NumPy scalars (and 0-d arrays) are one value.
    assert hgsim.load_scenario(changed(("training", "global_batch"), np.int64(8))) \
        ["training"]["global_batch"] == 8
    with pytest.raises(hgsim.Error, match=r"^description: not valid UTF-8 text .*\\udcff"):
        hgsim.load_scenario(changed(("description",), "a\udcffb"))
    with pytest.raises(hgsim.Error, match=r"^clusters\[0\]\.\\udcff: not valid UTF-8 text"):
        bad = changed(("name",), "tiny")
        bad["clusters"][0]["\udcff"] = 1
        hgsim.load_scenario(bad)
    with pytest.raises(hgsim.Error, match=r"^strategy\.micro_batch: a float NaN"):
        hgsim.load_scenario(changed(("strategy", "micro_batch"), float("nan")))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_trace_filter_is_checked_as_the_argument_it_is(tmp_path):
    trace = str(tmp_path / "t.json")
    for bad in (["cluster=east"], {"cluster": "east"}, 3):
        with pytest.raises(TypeError, match="^simulate: trace_filter must be a str .*not a "):
            hgsim.simulate(TINY, trace=trace, trace_filter=bad)
    with pytest.raises(hgsim.Error, match="trace_filter filters the trace written to trace="):
        hgsim.simulate(TINY, trace_filter="cluster=east")
    for text, message in (("foo=a", "trace_filter: unknown key 'foo'"),
                          ("cluster=nowhere", "trace_filter: cluster=nowhere: no such cluster")):
        with pytest.raises(hgsim.Error) as e:
            hgsim.simulate(TINY, trace=trace, trace_filter=text)
        assert message in str(e.value)
        assert "--trace" not in str(e.value)
