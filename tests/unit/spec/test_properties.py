"""Bad input never crashes orch: hypothesis feeds the job-file and settings loaders mutated
and random documents; each must give a usable result or one located InputError."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import time
import tracemalloc
from pathlib import Path

import pytest
import tomllib
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from orchestrator.base.errors import InputError, SpecError
from orchestrator.service.fingerprint import fingerprint
from orchestrator.settings import Settings, load_settings
from orchestrator.spec import MAX_BYTES, JobSpec, load_spec, load_spec_text, quantity_min
from tests.conftest import ROOT, run_orch
from tests.unit.spec.test_spec import BAD, SKYPILOT_TASK

# Deterministic in CI (same examples every run), no example database, no per-example deadline
# (the 2-core machine is shared); sized so the whole file runs in about 15 s.
PROPS = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.filter_too_much])


def props(examples: int) -> settings:
    return settings(PROPS, max_examples=examples)


# -- seeds ------------------------------------------------------------------------------------

TRAIN_TASK = """\
train:
  job: image-classification
  config: {epochs: 2, batch_size: 32, lr: 0.002}
  sweep: [lr]
scaling: {num_workers: 2, use_gpu: false, placement: spread}
precision: bf16
data: {loader_workers: 4, pin_memory: auto}
schedule: {kind: steady, cron: "0 3 * * *"}
budget: {max_cost: 12.5, max_hourly: 3}
placement: {allow: [local, cloud]}
checkpoint: {storage: "s3://bucket/ckpt", max_failures: 2, num_to_keep: 3}
estimate: {hours: 1.5, gpu: A100}
resources: {accelerators: [H100:1, A100:1], cpus: 8, memory: 32+, use_spot: true}
envs: {HF_HOME: /data/hf, SEED: 1}
"""
SKY_STORAGE = """\
name: sky-mounts
resources: {accelerators: A10G, cloud: aws, region: us-east-1, infra: aws/us-east-1}
file_mounts:
  /ckpt: {name: my-bucket, store: s3, mode: MOUNT, persistent: true}
  /data: s3://bucket/data
secrets: {HF_TOKEN: null}
run: python train.py
"""
ENTRYPOINT_TASK = """\
workdir: code
train: {entrypoint: "mytrain.main:train", config: {layers: [64, 64], opt: {name: adam, lr: 1e-3}}}
checkpoint: {resume_from: latest, max_failures: -1}
schedule: {kind: exploratory}
"""
GOOD_TEXTS = ([SKYPILOT_TASK, TRAIN_TASK, SKY_STORAGE, ENTRYPOINT_TASK]
              + [p.read_text() for p in sorted((ROOT / "examples").glob("*.yaml"))])
SPEC_TEXTS = GOOD_TEXTS + [doc for doc, *_ in BAD]


def _data(text: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:  # some BAD seeds are not YAML at all; they are text seeds only
        return None


SPEC_DATA = [d for d in map(_data, GOOD_TEXTS) if isinstance(d, dict)]
TOML_TEXT = (ROOT / "infra" / "onprem" / "orch.toml.example").read_text()
TOML_DATA = tomllib.loads(TOML_TEXT)


def _field_names(model: type[BaseModel], seen: set) -> set[str]:
    names = set()
    for name, field in model.model_fields.items():
        names.add(name)
        for sub in (field.annotation, *getattr(field.annotation, "__args__", ())):
            for leaf in (sub, *getattr(sub, "__args__", ())):
                if isinstance(leaf, type) and issubclass(leaf, BaseModel) and leaf not in seen:
                    seen.add(leaf)
                    names |= _field_names(leaf, seen)
    return names


SPEC_KEYS = sorted(_field_names(JobSpec, set()) | {"scalng", "acelerators", "<<", "sky", "Name"})
# `_cli_parse_args` and friends are BaseSettings.__init__ options: they must not get through.
SETTINGS_KEYS = sorted(_field_names(Settings, set()) | {"_cli_parse_args", "_env_prefix",
                                                        "_env_file", "_secrets_dir", "curency"})

# -- strategies -------------------------------------------------------------------------------

WEIRD_TEXT = ["", "auto", "H100:8", "H100:0", "H100:-1", "8+", "-1", "1e999", "~nobody-here/x",
              "../..", "\t", "a\x00b", "0 3 * * *", "s3://b/p", "image-classification",
              "pkg.mod:fn", "local", "cloud", "spread", "é", "🚀", "\u2028", "\ufeff", "x" * 300]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(),
    st.sampled_from([0, -1, 2**63, -2**63 - 1, 10**400, 1e308, -0.0]),
    st.floats(), st.text(max_size=20), st.sampled_from(WEIRD_TEXT), st.dates(),
    st.binary(max_size=6))


def values(keys: list[str]) -> st.SearchStrategy:
    key = st.one_of(st.sampled_from(keys), st.text(max_size=8), st.integers(-2, 2), st.none(),
                    st.booleans())
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(key, inner, max_size=4)), max_leaves=8)


def _containers(doc, path=()):
    """Every (path, container) in a document, the root first."""
    if isinstance(doc, (dict, list)):
        yield path, doc
        items = doc.items() if isinstance(doc, dict) else enumerate(doc)
        for k, v in items:
            yield from _containers(v, path + (k,))


@st.composite
def mutated(draw, seeds: list, keys: list[str]):
    """A seed document with 1-4 structural mutations: keys dropped, added or duplicated in
    meaning, values of the wrong type, wrong nesting, a list or a scalar at the top."""
    doc = copy.deepcopy(draw(st.sampled_from(seeds)))
    plausible = [v for seed in seeds for v in _leaves(seed)]  # right-looking, maybe wrong place
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4]))):
        spots = list(_containers(doc))
        if not spots:
            break
        _, box = draw(st.sampled_from(spots))
        slots = list(box) if isinstance(box, dict) else list(range(len(box)))
        op = draw(st.sampled_from(["drop", "set", "add", "wrap", "unwrap", "swap", "root"]))
        if op == "add" or not slots:
            if isinstance(box, dict):
                box[draw(st.sampled_from(keys))] = draw(values(keys))
            else:
                box.append(draw(values(keys)))
            continue
        slot = draw(st.sampled_from(slots))
        if op == "drop":
            del box[slot]
        elif op == "set":
            box[slot] = draw(st.one_of(st.sampled_from(plausible), values(keys)))
        elif op == "wrap":
            box[slot] = draw(st.sampled_from([[box[slot]], {draw(st.sampled_from(keys)): box[slot]}]))
        elif op == "unwrap" and isinstance(box[slot], (dict, list)) and box[slot]:
            inner = box[slot]
            box[slot] = inner[draw(st.sampled_from(list(inner) if isinstance(inner, dict)
                                                   else list(range(len(inner)))))]
        elif op == "swap":
            other = draw(st.sampled_from(slots))
            box[slot], box[other] = box[other], box[slot]
        elif op == "root":
            doc = draw(st.sampled_from([box[slot], [doc], draw(scalars)]))
    return doc


YAML_BITS = ["\t", "<<: *a\n", "&a ", "*a", "*nowhere", "!!int abc", "!!float x", "!!bool maybe",
             "!!timestamp 2020-99-99", "!!binary ~~~", "!!python/object:os.system ''",
             "!!set {a, b}", "? [a, b]\n: c\n", "---\n", "...\n", "%YAML 1.1\n---\n", "\ufeff",
             "\x00", "\x1b", "\ud800", "[" * 80, "{a: " * 70, "'", '"', ": :", "- ", "2020-13-45",
             "9" * 5000, "1e400", ".nan", "-.inf", "~", "é", "🚀", "\u2028", "\r", "\r\n",
             "0x1F", "0o17", "1_000", "<<: [*a, *b]\n", "&a [*a]", "{", "}", "]", "#", "|\n",
             ">-\n", "   ", "\"\\0\"", "\"\\uD800\"", "name: x\n", "run: echo\n",
             "a: &a [1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\n"]
TOML_BITS = ["[[onprem]]\n", "[local]\n", "[local.x]\n", "x = [", '"""', "'''", "inf", "nan",
             "-inf", "1979-05-27T07:32:00Z", "07:32:00", "0x", "[[", "]]", "a.b.c = 1\n",
             "\\u0000", "\\ud800", "\t", "=", " = ", "\"", "9" * 5000, "[" * 500, "{a = " * 300,
             "home = \"\\u0000\"\n", "_cli_parse_args = true\n", "_env_prefix = \"X_\"\n",
             "clouds = 5\n", "clouds = [1]\n", "currency_rate = inf\n", "onprem = [1]\n",
             "gpu_speeds = {a = \"x\"}\n", "\r\n", "é", "#", "\x7f", "\x00"]


@st.composite
def mutated_text(draw, base: st.SearchStrategy, bits: list[str]):
    """Text with 1-3 edits: fragments inserted, spans cut, lines duplicated, tabs, a truncation."""
    text = draw(base)
    for _ in range(draw(st.integers(1, 3))):
        n = len(text)
        at = draw(st.integers(0, n))
        op = draw(st.sampled_from(["insert", "insert", "cut", "dup", "tabs", "truncate", "chars"]))
        if op == "insert":
            if draw(st.booleans()):  # at a line start, where keys and markers mean most
                at = text.rfind("\n", 0, at) + 1
            text = text[:at] + draw(st.sampled_from(bits)) + text[at:]
        elif op == "cut":
            text = text[:at] + text[at + draw(st.integers(1, 40)):]
        elif op == "dup":
            lines = text.splitlines(keepends=True) or [""]
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(draw(st.integers(0, len(lines))), lines[i])
            text = "".join(lines)
        elif op == "tabs":
            text = text.replace("  ", "\t", draw(st.integers(1, 3)))
        elif op == "truncate":
            text = text[:at]
        else:
            text = text[:at] + draw(st.text(max_size=4)) + text[at:]
    return text


def yaml_dump(draw_style: st.SearchStrategy) -> st.SearchStrategy:
    return st.builds(lambda doc, flow, uni: yaml.safe_dump(doc, default_flow_style=flow,
                                                           allow_unicode=uni, sort_keys=False),
                     mutated(SPEC_DATA, SPEC_KEYS), draw_style, st.booleans())


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if v is None:
        return "null"  # TOML has none: a syntax error the loader must report
    if isinstance(v, bytes):
        v = v.decode("latin-1")
    return json.dumps(str(v), ensure_ascii=False)


def toml_key(k) -> str:
    k = str(k)
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k, ensure_ascii=False)


def toml_dump(doc) -> str:
    if not isinstance(doc, dict):
        return f"value = {toml_value(doc)}\n"
    return "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in doc.items())


spec_docs = st.one_of(
    yaml_dump(st.sampled_from([False, True, None])),
    yaml_dump(st.sampled_from([False, None])),
    mutated_text(st.sampled_from(SPEC_TEXTS), YAML_BITS),
    mutated_text(yaml_dump(st.just(False)), YAML_BITS))
toml_docs = st.one_of(
    st.builds(toml_dump, mutated([TOML_DATA, {}, {"local": {"watts": 100}}], SETTINGS_KEYS)),
    mutated_text(st.just(TOML_TEXT), TOML_BITS))
ENV_NAMES = (["ORCH_" + k.upper() for k in Settings.model_fields]
             + ["ORCH_LOCAL__WATTS", "ORCH_LOCAL__CPUS", "ORCH_ONPREM__0__GPU", "ORCH_HOME__X",
                "orch_mode", "Orch_Clouds", "ORCH_", "ORCH___", "ORCH_NOPE"])
ENV_VALUES = ['{"watts": 1}', '[{"gpu": "x", "purchase_price": 1}]', "[1]", "{bad", "inf",
              "nan", "-1", "1e999", '["aws"]', "", "hybrid", "local", "http://h:8265",
              "ftp://h", "aws,,runpod", '{"RTX4090": "fast"}', "null", "true", "[]", "{}"]
env_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                   max_size=20)
envs = st.dictionaries(
    st.one_of(st.sampled_from(ENV_NAMES),
              st.from_regex(r"ORCH_[A-Z_]{1,12}", fullmatch=True).filter(lambda n: n != "ORCH_CONFIG")),
    st.one_of(st.sampled_from(ENV_VALUES), env_text), max_size=4)

# -- the invariant ----------------------------------------------------------------------------


def assert_one_message(e: InputError, where: str) -> None:
    """One message (plus an optional hint line) that names the file or variable."""
    text = str(e)
    assert e.message and where in e.message, text
    assert "\n" not in e.message and (e.hint is None or "\n" not in e.hint), text
    assert len(text) < 1200, text
    assert "Traceback" not in text


def spec_outcome(load, file: str, text: str):
    """The loaded spec, used as orch uses it; or the located SpecError. Anything else is a bug."""
    try:
        spec = load()
    except SpecError as e:
        assert_one_message(e, file)
        assert e.file == file
        lines = len(re.findall("\r\n|[\r\n\x85\u2028\u2029]", text)) + 1  # YAML's line breaks
        assert e.line is None or 1 <= e.line <= lines, (e.line, str(e))
        return e
    for choice in spec.resources.accelerator_choices():
        assert choice.count > 0 and math.isfinite(choice.count) and str(choice)
    quantity_min(spec.resources.cpus), quantity_min(spec.resources.memory)
    assert all("\x00" not in v for v in spec.env_strings().values())
    stored = json.dumps(spec.model_dump(mode="json"), allow_nan=False)  # what the store keeps
    assert JobSpec.model_validate(json.loads(stored)) is not None
    if spec.workdir is None:  # with a workdir, fingerprint() hashes that directory
        fingerprint(spec)
    else:
        spec.workdir_path()
    return spec


def settings_outcome(cfg: Path, env: dict, text: str):
    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n in os.environ if n.upper().startswith("ORCH_")]:
            mp.delenv(name)
        mp.setenv("ORCH_CONFIG", str(cfg))
        for name, value in env.items():
            mp.setenv(name, value)
        try:
            s = load_settings()
        except InputError as e:
            var = re.match(r"environment variable (\S+):", e.message)
            if var:
                assert var.group(1).upper() in {n.upper() for n in env}, (e.message, env)
            else:
                assert_one_message(e, str(cfg))
                line = re.match(re.escape(str(cfg)) + r":(\d+):", e.message)
                assert line is None or 1 <= int(line.group(1)) <= text.count("\n") + 1, e.message
            assert_one_message(e, var.group(1) if var else str(cfg))
            return e
    floats = [v for v in _leaves(s.model_dump(mode="json")) if isinstance(v, float)]
    assert all(math.isfinite(v) for v in floats), floats
    assert s.effective_mode in ("local", "hybrid")
    assert all(isinstance(s.source_of(k), str) for k in Settings.model_fields)
    return s


def _leaves(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from _leaves(x)
    elif isinstance(v, list):
        for x in v:
            yield from _leaves(x)
    else:
        yield v


# -- the job file -----------------------------------------------------------------------------


@props(700)
@given(spec_docs)
@example("name: 2020-13-45\nrun: echo\n")
@example("run: !!int abc\n")
@example("resources:\n  accelerators: H100:" + "9" * 400 + "\nrun: echo\n")
@example("run: echo\nenvs: &a {A: *a}\n")
@example("run: echo\nworkdir: ~nobody-here/code\n")
@example("train:\n  job: image-classification\n  config: {a: {1: x, b: y}}\n")
@example("train:\n  job: image-classification\n  config: {x: !!binary /w==}\n")
def test_mutated_job_files(text):
    spec_outcome(lambda: load_spec_text(text, "job.yaml"), "job.yaml", text)


@props(150)
@given(st.text(max_size=200))
def test_random_text_job_files(text):
    spec_outcome(lambda: load_spec_text(text, "job.yaml"), "job.yaml", text)


@props(60)
@given(st.one_of(st.binary(max_size=200), spec_docs.map(lambda t: t.encode("utf-8", "replace")),
                 st.sampled_from([b"\xff\xfe\x00r\x00u\x00n\x00", b"\xef\xbb\xbfrun: echo\n",
                                  b"run: echo\r\nname: crlf\r\n", b"run: \xe9cho\n"])))
def test_job_files_on_disk(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("spec", numbered=True) / "job.yaml"
    path.write_bytes(data)
    spec_outcome(lambda: load_spec(path), str(path), data.decode("utf-8", "replace"))


@st.composite
def alias_bombs(draw):
    """A 'billion laughs' document: each level repeats the one below `width` times."""
    width, depth = draw(st.integers(2, 12)), draw(st.integers(1, 9))
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, depth)]
    where = draw(st.sampled_from(["top", "config", "envs", "mounts"]))
    if where == "top":
        return "\n".join(lines) + "\nrun: echo\n"
    # Anchors where free-form values are allowed, so that a small "bomb" is a valid job.
    defs = "[" + ", ".join(ln.split(": ", 1)[1] for ln in lines) + "]"
    last = f"*a{depth - 1}"
    return {"config": f"train:\n  job: image-classification\n  config: {{defs: {defs}, x: {last}}}\n",
            "envs": f"run: echo\nfile_mounts: {{/d: {{defs: {defs}}}}}\nenvs: {{A: {last}}}\n",
            "mounts": f"run: echo\nfile_mounts: {{/d: {{defs: {defs}, source: {last}}}}}\n"}[where]


@props(40)
@given(alias_bombs())
def test_alias_bombs_are_refused_fast(text):
    start = time.perf_counter()
    spec_outcome(lambda: load_spec_text(text, "bomb.yaml"), "bomb.yaml", text)
    assert time.perf_counter() - start < 3


@st.composite
def deep_documents(draw):
    depth = draw(st.integers(1, 3000))
    style = draw(st.sampled_from(["flow-list", "flow-map", "block-map", "mixed"]))
    if style == "flow-list":
        value = "[" * depth + "]" * depth
    elif style == "flow-map":
        value = "{a: " * depth + "1" + "}" * depth
    elif style == "mixed":
        value = "[{a: " * (depth // 2) + "1" + "}]" * (depth // 2)
    else:
        return "run: echo\ntrain:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(min(depth, 400)))
    key = draw(st.sampled_from(["train:\n  job: image-classification\n  config: {x: %s}\n",
                                "run: echo\nx: %s\n", "run: echo\nenvs: {A: %s}\n"]))
    return key % value


@props(30)
@given(deep_documents())
def test_deep_nesting_never_overflows_the_stack(text):
    spec_outcome(lambda: load_spec_text(text, "deep.yaml"), "deep.yaml", text)


def test_alias_bomb_uses_no_memory():
    levels = "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 9))
    bomb = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + levels + "run: echo\n"
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(SpecError) as info:
        load_spec_text(bomb, "bomb.yaml")
    seconds, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # 10^9 values if expanded; refused at line 5 where the running total passes 100,000.
    assert str(info.value).startswith("bomb.yaml:5: expands to more than 100,000 values")
    assert seconds < 1 and peak < 5 * 2**20, (seconds, peak)


def test_huge_and_endless_files_are_refused_after_one_mebibyte(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"run: echo\n" + b"# padding\n" * (3 * MAX_BYTES // 10))
    start = time.perf_counter()
    with pytest.raises(SpecError, match=r"big.yaml: the job file is 3,145,730 bytes; the limit is 1,048,576 bytes"):
        load_spec(big)
    with pytest.raises(SpecError, match=r"/dev/zero: is a character device, not a job file"):
        load_spec("/dev/zero")  # endless: refused before it is opened
    assert time.perf_counter() - start < 1
    with pytest.raises(SpecError, match="the limit is"):
        load_spec_text("run: echo\n" + " " * MAX_BYTES, "big.yaml")


def test_bad_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"run: echo\nname: caf\xe9\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.line == 2 and "is not UTF-8 text (byte 19 is 0xe9)" in str(info.value)


# -- settings ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cfg_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("settings")


@props(300)
@given(toml_docs, st.one_of(st.just({}), envs))
@example("clouds = 5\n", {})
@example("_cli_parse_args = true\n", {})
@example("_env_prefix = \"X_\"\n", {"ORCH_MODE": "sideways"})
@example("currency_rate = inf\n", {})
@example("x = " + "[" * 500 + "]" * 500 + "\n", {})
@example("", {"ORCH_ONPREM": "notjson"})
@example("[local]\nwatts = 'x'\n", {})
def test_mutated_settings(cfg_dir, text, env):
    cfg = cfg_dir / "config.toml"
    cfg.write_text(text, encoding="utf-8", errors="surrogatepass")
    settings_outcome(cfg, env, text)


@props(120)
@given(envs)
def test_random_environment(cfg_dir, env):
    settings_outcome(cfg_dir / "absent.toml", env, "")


@props(60)
@given(st.binary(max_size=120))
def test_random_settings_bytes(cfg_dir, data):
    cfg = cfg_dir / "bytes.toml"
    cfg.write_bytes(data)
    settings_outcome(cfg, {}, data.decode("utf-8", "replace"))


def test_settings_errors_name_the_line_and_the_variable(cfg_dir):
    cfg = cfg_dir / "lines.toml"
    cfg.write_text("mode = \"hybrid\"\n\n[[onprem]]\ngpu = \"A100\"\npurchase_price = 1\n\n"
                   "[[onprem]]\ngpu = \"H100\"\nwatts = \"hot\"\npurchase_price = 2\n")
    e = settings_outcome(cfg, {}, cfg.read_text())
    assert e.message == f"{cfg}:9: onprem.1.watts: Input should be a valid number, unable to parse string as a number"
    e = settings_outcome(cfg_dir / "absent.toml", {"ORCH_LOCAL__WATTS": "hot"}, "")
    assert e.message.startswith("environment variable ORCH_LOCAL__WATTS: local.watts: ")
    e = settings_outcome(cfg_dir / "absent.toml", {"ORCH_GPU_SPEEDS": "{RTX: 1}"}, "")
    assert e.message.startswith("environment variable ORCH_GPU_SPEEDS: gpu_speeds: not a valid JSON")
    s = settings_outcome(cfg_dir / "absent.toml", {"ORCH_CLOUDS": '["RunPod", "aws"]'}, "")
    assert s.clouds == ["runpod", "aws"]


# -- the real CLI on inputs hypothesis found --------------------------------------------------

CLI_SPECS = [
    ("date.yaml", "name: 2020-13-45\nrun: echo\n", "date.yaml:1: YAML error: '2020-13-45' is not a valid timestamp"),
    ("tag.yaml", "run: !!int abc\n", "tag.yaml:1: YAML error: 'abc' is not a valid int"),
    ("self.yaml", "run: echo\nenvs: &a {A: *a}\n", "self.yaml:2: the alias *a is inside the value"),
    ("deep.yaml", "run: echo\nx: " + "[" * 3000 + "]" * 3000 + "\n", "deep.yaml:2: nested more than 64 levels"),
    ("count.yaml", "resources:\n  accelerators: H100:" + "9" * 400 + "\nrun: echo\n", "count must be a positive number"),
]
CLI_CONFIGS = [
    ("clouds = 5\n", {}, "config.toml:1: clouds: 5: write a list of cloud names"),
    ("_cli_parse_args = true\n", {}, "config.toml:1: unknown setting '_cli_parse_args'"),
    ("currency = \"caf\xe9\"\n".encode("latin-1"), {}, "config.toml:1: is not UTF-8 text"),
    ("", {"ORCH_LOCAL": "{watts: 1}"}, "environment variable ORCH_LOCAL: local: not a valid JSON"),
]


def _assert_refused(proc, home: Path, words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    # One message: the first line (rich may wrap it), no second "error:" line.
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error: ") and sum(ln.startswith("error") for ln in lines) == 1, proc.stderr
    assert words in proc.stderr.replace("\n", " "), proc.stderr
    assert not (home / "orch.db").exists(), "bad input must not touch the store"


@pytest.mark.parametrize("name,doc,words", CLI_SPECS, ids=[c[0] for c in CLI_SPECS])
def test_cli_plan_refuses_bad_job_files(orch_home, tmp_path, name, doc, words):
    path = tmp_path / name
    path.write_text(doc)
    _assert_refused(run_orch(orch_home, "plan", str(path), timeout=60), orch_home, words)


@pytest.mark.parametrize("config,env,words", CLI_CONFIGS, ids=["clouds", "init-option", "latin1", "env-json"])
def test_cli_submit_refuses_broken_settings(orch_home, config, env, words):
    (orch_home / "config.toml").write_bytes(config if isinstance(config, bytes) else config.encode())
    proc = run_orch(orch_home, "submit", "--detach", str(ROOT / "examples" / "quickstart.yaml"),
                    timeout=60, **env)
    _assert_refused(proc, orch_home, words)
