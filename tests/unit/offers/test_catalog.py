"""Cloud offers from SkyPilot catalogs in a fixture directory, with the network cut off."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from orchestrator.base.errors import BackendError, InputError
from orchestrator.offers import catalog
from orchestrator.offers.catalog import cloud_offers, default_catalog_dir
from orchestrator.service.planning import gather_offers
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from tests.conftest import ROOT


def _gpu_info(name: str, count: int, mib: int) -> str:
    info = (f"{{'Gpus': [{{'Name': '{name}', 'Manufacturer': 'NVIDIA', 'Count': {count}, "
            f"'MemoryInfo': {{'SizeInMiB': {mib}}}}}], 'TotalGpuMemoryInMiB': {mib * count}}}")
    return f'"{info}"'


# SkyPilot's own column names and layout, as its data fetchers write them.
CATALOGS = {
    "lambda": [
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice",
        f"gpu_1x_a100_sxm4,A100,1,30,200,1.29,us-east-1,{_gpu_info('A100', 1, 40960)},",
        f"gpu_1x_a100_sxm4,A100,1,30,200,1.29,us-west-1,{_gpu_info('A100', 1, 40960)},",
        f"gpu_8x_h100_sxm5,H100,8,208,1800,23.92,us-east-1,{_gpu_info('H100', 8, 81920)},",
        "cpu_4x,,,4,16,0.10,us-east-1,,",
    ],
    "runpod": [
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Region,SpotPrice,Price,"
        "AvailabilityZone,GpuInfo",
        f"1x_A100-80GB_SECURE,A100-80GB,1,8,117,CA,1.05,1.89,CA-MTL-1,{_gpu_info('A100-80GB', 1, 81920)}",
        f"1x_RTX4090_SECURE,RTX4090,1,6,41,US,0.34,0.69,US-GA-1,{_gpu_info('RTX4090', 1, 24576)}",
    ],
    "aws": [
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,"
        "AvailabilityZone,Arch",
        f"g5.xlarge,A10G,1,4,16,{_gpu_info('A10G', 1, 24576)},1.006,0.42,us-east-1,use1-az1,x86_64",
        f"g5.xlarge,A10G,1,4,16,{_gpu_info('A10G', 1, 24576)},1.006,0.39,us-east-1,use1-az2,x86_64",
        f"p4d.24xlarge,A100,8,96,1152,{_gpu_info('A100', 8, 40960)},32.77,,us-east-1,use1-az1,x86_64",
    ],
}


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any attempt to reach a host fails the test at once instead of hanging."""
    def refuse(*a, **k):
        raise AssertionError(f"network access attempted: {a!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for k in list(os.environ):
        if k.startswith("ORCH_"):
            monkeypatch.delenv(k)


@pytest.fixture
def catalogs(tmp_path):
    for cloud, lines in CATALOGS.items():
        (tmp_path / cloud).mkdir()
        (tmp_path / cloud / "vms.csv").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_offers_from_fixture_catalogs(catalogs):
    offers = cloud_offers(["lambda", "runpod", "aws"], catalogs)
    by = {(o.cloud, o.instance_type, o.region, o.spot): o for o in offers}
    # Lambda has no spot market; each region is its own offer; CPU-only rows are skipped.
    assert {k for k in by if k[0] == "lambda"} == {
        ("lambda", "gpu_1x_a100_sxm4", "us-east-1", False),
        ("lambda", "gpu_1x_a100_sxm4", "us-west-1", False),
        ("lambda", "gpu_8x_h100_sxm5", "us-east-1", False)}
    h100 = by[("lambda", "gpu_8x_h100_sxm5", "us-east-1", False)]
    assert (h100.gpu, h100.count, h100.cpus, h100.memory_gb, h100.price_per_hour) == \
        ("H100", 8, 208, 1800, 23.92)
    assert by[("runpod", "1x_RTX4090_SECURE", "US", True)].price_per_hour == 0.34
    assert by[("runpod", "1x_RTX4090_SECURE", "US", False)].price_per_hour == 0.69
    assert by[("runpod", "1x_A100-80GB_SECURE", "CA", False)].gpu == "A100-80GB"
    # AWS: the cheapest zone's spot price per region; no spot offer where none is priced.
    assert by[("aws", "g5.xlarge", "us-east-1", True)].price_per_hour == 0.39
    assert ("aws", "p4d.24xlarge", "us-east-1", True) not in by
    assert all(o.target == "cloud" for o in offers)


def test_only_the_enabled_clouds(catalogs):
    assert {o.cloud for o in cloud_offers(["RunPod"], catalogs)} == {"runpod"}
    assert cloud_offers([], catalogs) == []


def test_a_missing_catalog_is_a_clear_error(catalogs):
    with pytest.raises(BackendError) as e:
        cloud_offers(["lambda", "vast"], catalogs)
    msg = str(e.value)
    assert "vast: no catalog at" in msg and str(catalogs / "vast" / "vms.csv") in msg
    assert "ORCH_CATALOG_DIR" in e.value.hint and "vast" in e.value.hint


@pytest.mark.parametrize("content,fragment", [
    (b"", "cannot read"),
    (b"\x00\xff\xfe garbage \x00", "cannot read"),
    (b"name,price\nfoo,1\n", "is not a SkyPilot catalog (no column InstanceType"),
    (("\n".join(CATALOGS["lambda"][:1] + ["x,A100,1,4,16,1.0,r,\"{'Gpus': 7}\","]) + "\n").encode(),
     "cannot read"),
])
def test_an_unreadable_catalog_is_a_clear_error(tmp_path, content, fragment):
    (tmp_path / "lambda").mkdir()
    (tmp_path / "lambda" / "vms.csv").write_bytes(content)
    with pytest.raises(BackendError) as e:
        cloud_offers(["lambda"], tmp_path)
    assert fragment in str(e.value) and "lambda" in str(e.value)


def test_a_directory_in_place_of_the_file(tmp_path):
    (tmp_path / "lambda" / "vms.csv").mkdir(parents=True)
    with pytest.raises(BackendError, match="lambda: no catalog at"):
        cloud_offers(["lambda"], tmp_path)


@pytest.mark.parametrize("cloud,fragment", [("nosuchcloud", "unknown cloud"),
                                            ("kubernetes", "no price catalog"),
                                            ("gcp", "no price catalog")])
def test_clouds_orch_cannot_price(tmp_path, cloud, fragment):
    with pytest.raises(InputError, match=fragment):
        cloud_offers([cloud], tmp_path)


def test_default_directory_is_skypilots():
    assert default_catalog_dir().as_posix().rstrip("/").endswith(".sky/catalogs/v8")


def test_planning_reads_the_catalog_dir_setting(catalogs):
    spec = load_spec_text("name: t\nrun: x\nresources: {accelerators: 'RTX4090:1'}\n")
    s = Settings(clouds=["runpod"], catalog_dir=catalogs)
    clouds = [o for o in gather_offers(spec, s) if o.target == "cloud"]
    assert {o.instance_type for o in clouds} == {"1x_RTX4090_SECURE", "1x_A100-80GB_SECURE"}
    no_cloud = load_spec_text("name: t\nrun: x\nplacement: {allow: [local]}\n")
    # Not allowed in the cloud: the catalogs are not even read.
    s = Settings(clouds=["vast"], catalog_dir=catalogs)
    assert [o for o in gather_offers(no_cloud, s) if o.target != "local"] == []


# What a new process reads: the offers (sorted), whether it imported SkyPilot, and pandas.
_READ = """import json, sys
from orchestrator.offers.catalog import cloud_offers
offers = sorted((o.cloud, o.instance_type, o.region, o.spot, o.price_per_hour, o.gpu, o.count)
                for o in cloud_offers(["lambda", "runpod", "aws"], sys.argv[1]))
print(json.dumps([offers, any(m == "sky" or m.startswith("sky.") for m in sys.modules),
                  "pandas" in sys.modules]))
"""


def _read_in_a_new_process(catalog_dir, cache) -> tuple[list, bool, bool]:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _READ, str(catalog_dir)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    offers, sky, pandas = json.loads(proc.stdout)
    return [tuple(o) for o in offers], sky, pandas


def test_a_later_process_reads_the_kept_offers_without_importing_skypilot(catalogs, tmp_path):
    cache = tmp_path / "cache"
    cold, cold_sky, _ = _read_in_a_new_process(catalogs, cache)
    warm, warm_sky, warm_pandas = _read_in_a_new_process(catalogs, cache)
    assert cold_sky and not warm_sky and not warm_pandas, "the kept offers were not used"
    assert warm == cold and len(cold) == 10
    assert ("runpod", "1x_RTX4090_SECURE", "US", False, 0.69, "RTX4090", 1.0) in warm
    # A catalog that changed (SkyPilot fetched a new one) is read again, by SkyPilot's code.
    lines = CATALOGS["runpod"][:2] + [CATALOGS["runpod"][2].replace(",0.69,", ",0.59,")]
    (catalogs / "runpod" / "vms.csv").write_text("\n".join(lines) + "\n")
    changed, changed_sky, _ = _read_in_a_new_process(catalogs, cache)
    assert changed_sky
    assert ("runpod", "1x_RTX4090_SECURE", "US", False, 0.59, "RTX4090", 1.0) in changed
    assert [o for o in changed if o[1] != "1x_RTX4090_SECURE"] == [
        o for o in cold if o[1] != "1x_RTX4090_SECURE"]


def test_a_damaged_or_unwritable_cache_only_costs_a_read(catalogs, tmp_path, monkeypatch):
    want = sorted(map(repr, cloud_offers(["lambda", "aws"], catalogs)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    catalog._CACHE.clear()
    assert sorted(map(repr, cloud_offers(["lambda", "aws"], catalogs))) == want
    kept = sorted((tmp_path / "cache" / "orch").glob("skypilot-*-offers-*.json"))
    assert [p.name.split("-offers-")[1].split("-")[0] for p in kept] == ["aws", "lambda"]
    for p in kept:
        p.write_text("{not json")
    next((tmp_path / "cache" / "orch").glob("skypilot-*-clouds.json")).write_text('"x"')
    catalog._CACHE.clear()
    assert sorted(map(repr, cloud_offers(["lambda", "aws"], catalogs))) == want
    with pytest.raises(InputError, match="unknown cloud"):
        cloud_offers(["nosuchcloud"], catalogs)  # the damaged cloud list was made again
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # no folder can be made under it
    catalog._CACHE.clear()
    assert sorted(map(repr, cloud_offers(["lambda", "aws"], catalogs))) == want
    assert default_catalog_dir().as_posix().rstrip("/").endswith(".sky/catalogs/v8")
