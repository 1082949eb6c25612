"""Hostlist expansion and compression, checked against tables and against Slurm's scontrol."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ft.hostlist import DEFAULT_MAX_HOSTS, HostlistError, compress, count, expand

pytestmark = pytest.mark.timeout(120)

EXPAND_CASES = [
    ("node1", ["node1"]),
    ("", []),
    ("a,b,c", ["a", "b", "c"]),
    ("a,,b,", ["a", "b"]),  # empty items skipped, as Slurm does
    ("a b\tc", ["a", "b", "c"]),  # whitespace separates, as Slurm does
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[01-3]", ["n01", "n02", "n03"]),  # width comes from the low bound
    ("n[1-03]", ["n1", "n2", "n3"]),
    ("n[9-010]", ["n9", "n10"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("n[007]", ["n007"]),
    ("n[1-1]", ["n1"]),
    ("n[1-3,7,09-10]", ["n1", "n2", "n3", "n7", "n09", "n10"]),
    ("n[3,1,2,1]", ["n3", "n1", "n2", "n1"]),
    ("n[1-3,2-4]", ["n1", "n2", "n3", "n2", "n3", "n4"]),
    ("n[1-2],n1,n[1-2]", ["n1", "n2", "n1", "n1", "n2"]),
    # Text after the last bracket is our extension; Slurm 22.05 rejects it.
    ("node[1-3].ib", ["node1.ib", "node2.ib", "node3.ib"]),
    ("node[1-2]-ib,x", ["node1-ib", "node2-ib", "x"]),
    ("127.0.1.[1-3]", ["127.0.1.1", "127.0.1.2", "127.0.1.3"]),
    ("n1[2-3]", ["n12", "n13"]),
    ("[1-3]", ["1", "2", "3"]),
    (
        "rack[0-1]-blade[0-3]",
        [f"rack{r}-blade{b}" for r in range(2) for b in range(4)],
    ),
    ("n[1-2][3-4]", ["n13", "n14", "n23", "n24"]),
    # Slurm's order for three or more groups: last fastest, then first, ..., second-to-last slowest.
    (
        "a[1-2]b[1-2]c[1-2]",
        ["a1b1c1", "a1b1c2", "a2b1c1", "a2b1c2", "a1b2c1", "a1b2c2", "a2b2c1", "a2b2c2"],
    ),
    (
        "a[1-2]b[1-2]c[1-2]d[1-2]",
        [f"a{a}b{b}c{c}d{d}" for c in (1, 2) for b in (1, 2) for a in (1, 2) for d in (1, 2)],
    ),
    ("r[1-2]-b[01-02].ib", ["r1-b01.ib", "r1-b02.ib", "r2-b01.ib", "r2-b02.ib"]),  # suffix
    ("n[99999998-99999999]", ["n99999998", "n99999999"]),
]

SUFFIX_CASES = {"node[1-3].ib", "node[1-2]-ib,x", "r[1-2]-b[01-02].ib"}

INVALID_CASES = [
    ("n[5-3]", "range 5-3 is reversed"),
    ("n[10-9]", "range 10-9 is reversed"),
    ("n[]", "an empty range in [] is not N or N-M"),
    ("n[1,,2]", "an empty range in [1,,2]"),
    ("n[3-]", "range '3-' in [3-] is not N or N-M"),
    ("n[-3]", "range '-3'"),
    ("n[a-b]", "range 'a-b'"),
    ("n[+1]", "range '+1'"),
    ("n[ 1-2]", "range ' 1-2'"),
    ("n[0x1]", "range '0x1'"),
    ("n[1-[2]]", "nested '[' at position 4"),
    ("n[[1]]", "nested '[' at position 2"),
    ("n[1-2", "'[' at position 1 is never closed"),
    ("n[1-2],m[", "'[' at position 8 is never closed"),
    ("n1-2]", "']' at position 4 has no matching '['"),
    ("n[1-2]]", "']' at position 6 has no matching '['"),
    ("n]", "']' at position 1"),
]


@pytest.mark.parametrize(("expr", "expected"), EXPAND_CASES)
def test_expand(expr: str, expected: list[str]) -> None:
    assert expand(expr) == expected
    assert count(expr) == len(expected)


@pytest.mark.parametrize(("expr", "message"), INVALID_CASES)
def test_invalid_expressions_are_rejected_with_a_reason(expr: str, message: str) -> None:
    with pytest.raises(HostlistError) as info:
        expand(expr)
    assert message in str(info.value)
    assert repr(expr) in str(info.value)


def test_default_cap() -> None:
    assert DEFAULT_MAX_HOSTS == 65536
    assert len(expand("n[0-65535]")) == 65536
    with pytest.raises(HostlistError, match=r"stands for more than 65536 hosts"):
        expand("n[0-65536]")


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    "expr",
    [
        "n[0-999999999]",
        "n[0-999999999999999999999999999999]",
        "a[0-99999]b[0-99999]c[0-99999]",
        "n[1-2],m[0-999999999]",
    ],
)
def test_huge_expressions_fail_before_expanding(expr: str) -> None:
    with pytest.raises(HostlistError, match="stands for more than"):
        expand(expr)


def test_cap_is_an_argument_and_counts_all_items() -> None:
    assert expand("n[1-4]", max_hosts=4) == ["n1", "n2", "n3", "n4"]
    with pytest.raises(HostlistError, match="more than 3 hosts"):
        expand("n[1-4]", max_hosts=3)
    with pytest.raises(HostlistError, match="more than 3 hosts"):
        expand("n[1-2],m[1-2]", max_hosts=3)
    with pytest.raises(HostlistError, match="more than 3 hosts"):
        expand("a[1-2]b[1-2]", max_hosts=3)


def test_long_expressions_are_shortened_in_messages() -> None:
    expr = ",".join(f"host{i}" for i in range(100)) + ",n[2-1]"
    with pytest.raises(HostlistError) as info:
        expand(expr)
    assert len(str(info.value)) < 200
    assert "range 2-1 is reversed" in str(info.value)


COMPRESS_CASES = [
    ([], ""),
    (["node1"], "node1"),
    (["n1", "n2", "n3"], "n[1-3]"),
    (["n08", "n09", "n10"], "n[08-10]"),
    (["n8", "n9", "n10"], "n[8-10]"),
    (["n8", "n09"], "n[8,09]"),
    (["n1", "n2", "n3", "n7", "n09", "n10"], "n[1-3,7,09-10]"),
    (["n3", "n2", "n1"], "n[3,2,1]"),
    (["n1", "n1"], "n[1,1]"),
    (["n1", "m1", "n2"], "n1,m1,n2"),
    (["login", "n1", "n2", "gpu"], "login,n[1-2],gpu"),
    (["127.0.1.1", "127.0.1.2", "127.0.1.3"], "127.0.1.[1-3]"),
    (["node1.ib", "node2.ib"], "node1.ib,node2.ib"),
    (["rack0-blade0", "rack0-blade1", "rack1-blade0"], "rack0-blade[0-1],rack1-blade0"),
    (["1", "2", "3"], "[1-3]"),
    (["n99", "n100"], "n[99-100]"),
    (["n099", "n100"], "n[099-100]"),
]


@pytest.mark.parametrize(("hosts", "expected"), COMPRESS_CASES)
def test_compress(hosts: list[str], expected: str) -> None:
    assert compress(hosts) == expected
    assert expand(expected) == hosts


@pytest.mark.parametrize("bad", ["", "a,b", "n[1]", "a]", "a b", "a\tb"])
def test_compress_rejects_names_a_hostlist_cannot_hold(bad: str) -> None:
    with pytest.raises(HostlistError, match="cannot be written in a hostlist"):
        compress(["ok1", bad])


# --- property tests ---------------------------------------------------------------------


@st.composite
def host_names(draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from(["n", "node", "rack1-b", "127.0.1.", "", "gpu-", "x9y"]))
    if draw(st.booleans()):
        value = draw(st.integers(0, 130))
        width = draw(st.integers(1, 4))
        return f"{prefix}{value:0{width}d}"
    return prefix + draw(st.sampled_from(["login", "a", "b-c", "x.y"]))


@st.composite
def host_lists(draw: st.DrawFn) -> list[str]:
    """Lists with long ascending runs (what compression is for) mixed with arbitrary names."""
    out: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            out.extend(draw(st.lists(host_names(), max_size=4)))
        else:
            prefix = draw(st.sampled_from(["n", "node", "127.0.1."]))
            start = draw(st.integers(0, 120))
            width = draw(st.integers(1, 3))
            out.extend(f"{prefix}{v:0{width}d}" for v in range(start, start + draw(st.integers(1, 12))))
    return out


@given(host_lists())
@settings(max_examples=300)
def test_compress_expand_round_trip(hosts: list[str]) -> None:
    expr = compress(hosts)
    assert expand(expr) == hosts


@st.composite
def range_texts(draw: st.DrawFn) -> tuple[str, int]:
    lo = draw(st.integers(0, 150))
    lo_s = f"{lo:0{draw(st.integers(1, 4))}d}"
    if draw(st.booleans()):
        return lo_s, 1
    hi = lo + draw(st.integers(0, 3))
    hi_s = f"{hi:0{draw(st.integers(1, 4))}d}"
    return f"{lo_s}-{hi_s}", hi - lo + 1


@st.composite
def expressions(draw: st.DrawFn) -> str:
    """Valid expressions in the subset Slurm 22.05 reads (no text after the last bracket)."""
    items = []
    for _ in range(draw(st.integers(1, 3))):
        groups = draw(st.integers(0, 3))
        if groups == 0:
            items.append(draw(st.sampled_from(["n", "a-b", "x.y"])) + draw(st.sampled_from(["", "1", "07"])))
            continue
        parts = [draw(st.text(alphabet="abnx-.1", max_size=3))]
        for g in range(groups):
            ranges = draw(st.lists(range_texts(), min_size=1, max_size=2))
            parts.append("[" + ",".join(text for text, _ in ranges) + "]")
            if g < groups - 1:
                parts.append(draw(st.text(alphabet="abx-.", max_size=2)))
        items.append("".join(parts))
    return ",".join(items)


@given(expressions())
@settings(max_examples=300)
def test_expand_and_compress_agree_on_generated_expressions(expr: str) -> None:
    hosts = expand(expr)
    assert len(hosts) == count(expr)
    assert expand(compress(hosts)) == hosts


# --- against Slurm's own parser ----------------------------------------------------------


@pytest.fixture(scope="module")
def scontrol_hostnames(tmp_path_factory: pytest.TempPathFactory):
    """``scontrol show hostnames EXPR`` as a function, with a throwaway slurm.conf.

    scontrol refuses to run without a configuration source (it tries DNS SRV records),
    but expanding a hostlist needs no controller, so a minimal file is enough.
    """
    exe = shutil.which("scontrol")
    if exe is None:
        pytest.skip("scontrol is not on PATH")
    conf_dir: Path = tmp_path_factory.mktemp("slurmconf")
    conf = conf_dir / "slurm.conf"
    conf.write_text(
        "ClusterName=hostlisttest\n"
        "SlurmctldHost=localhost\n"
        "NodeName=localhost CPUs=1 State=UNKNOWN\n"
        "PartitionName=p Nodes=localhost Default=YES\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(conf)

    def run(expr: str) -> list[str]:
        proc = subprocess.run(
            [exe, "--", "show", "hostnames", expr],  # "--": expressions may start with "-"
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        # Slurm 22.05 exits 0 even for "Invalid hostlist": the output is what counts.
        return proc.stdout.split()

    if run("n[1-2]") != ["n1", "n2"]:
        pytest.skip("scontrol show hostnames does not work here")
    return run


@pytest.mark.parametrize(("expr", "expected"), [c for c in EXPAND_CASES if c[0] and c[0] not in SUFFIX_CASES])
def test_table_matches_scontrol(scontrol_hostnames, expr: str, expected: list[str]) -> None:
    assert scontrol_hostnames(expr) == expected


@pytest.mark.parametrize("expr", ["n[5-3]", "n[10-9]", "n[]", "n[1,,2]", "n[-3]", "n[a-b]", "n[1-[2]]"])
def test_scontrol_also_rejects(scontrol_hostnames, expr: str) -> None:
    assert scontrol_hostnames(expr) == []
    with pytest.raises(HostlistError):
        expand(expr)


@given(expressions())
@settings(max_examples=150, deadline=None)
def test_expand_matches_scontrol(scontrol_hostnames, expr: str) -> None:
    assert expand(expr) == scontrol_hostnames(expr)


@given(host_lists().filter(bool))
@settings(max_examples=150, deadline=None)
def test_scontrol_reads_what_compress_writes(scontrol_hostnames, hosts: list[str]) -> None:
    assert scontrol_hostnames(compress(hosts)) == hosts
