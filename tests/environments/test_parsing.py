"""Property tests for what the environments parse: Slurm hostlists, Slurm's per-node counts and
every launcher integer.

The hostlist compressor is ours (``_hostlist.compress``), so the round trip checks the parser
against an independent writer; the product and padding properties check the parser against
expansions computed here with ``itertools.product`` and ``str.zfill``.
"""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import accelbackends
from accelbackends import ConfigError
from accelbackends.environments import _hostlist
from accelbackends.environments._common import port_from_id, read_int, read_port
from accelbackends.environments.slurm import parse_counts

# -- hostlists ------------------------------------------------------------------------------------

_name = st.from_regex(r"[a-z][a-z0-9-]{0,6}[a-z-]", fullmatch=True)
_digits = st.integers(min_value=0, max_value=2000)


@st.composite
def host_names(draw: st.DrawFn) -> str:
    """A host name as clusters write them: letters, maybe a zero-padded number at the end."""
    base = draw(_name)
    if draw(st.booleans()):
        return base
    number = draw(_digits)
    width = draw(st.integers(min_value=1, max_value=5))
    return base + str(number).zfill(width)


@st.composite
def numbered_runs(draw: st.DrawFn) -> list[str]:
    """Realistic node lists: a few runs of consecutive, equally padded node numbers."""
    hosts: list[str] = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        prefix = draw(st.sampled_from(["node", "gpu", "rack1-n", "x3006c0s", "cn"]))
        width = draw(st.integers(min_value=1, max_value=4))
        start = draw(st.integers(min_value=0, max_value=50))
        length = draw(st.integers(min_value=1, max_value=20))
        hosts += [prefix + str(n).zfill(width) for n in range(start, start + length)]
    return hosts


@given(st.lists(host_names(), min_size=1, max_size=40))
@example(["node9", "node10", "node11"])
@example(["node09", "node10"])
@example(["n00", "n1"])
@example(["node", "node1", "node2"])
def test_compressing_then_expanding_any_host_list_gives_it_back_in_order(
    hosts: list[str],
) -> None:
    text = _hostlist.compress(hosts)
    assert _hostlist.expand(text, source="X") == hosts
    assert _hostlist.count(text, source="X") == len(hosts)
    assert _hostlist.first_host(text, source="X") == hosts[0]


@given(numbered_runs())
def test_consecutive_nodes_compress_into_ranges_that_round_trip(hosts: list[str]) -> None:
    text = _hostlist.compress(hosts)
    assert "[" in text or len(hosts) == 1 or "," in text
    assert len(text) <= len(",".join(hosts))
    assert _hostlist.expand(text, source="X") == hosts


@st.composite
def bracket(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A bracket body like ``01-04,07`` and the numbers it stands for, padding included."""
    items, values = [], []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        low = draw(st.integers(min_value=0, max_value=120))
        high = draw(st.integers(min_value=low, max_value=low + 6))
        width = draw(st.integers(min_value=1, max_value=4))
        low_text = str(low).zfill(width)
        items.append(low_text if low == high else f"{low_text}-{high}")
        values += [str(n).zfill(len(low_text)) for n in range(low, high + 1)]
    return ",".join(items), values


@given(
    st.lists(st.tuples(_name, bracket()), min_size=1, max_size=3),
    st.sampled_from(["", "-ib", ".local"]),
)
def test_several_brackets_multiply_out_first_bracket_slowest_with_padding_kept(
    parts: list[tuple[str, tuple[str, list[str]]]], suffix: str
) -> None:
    text = "".join(f"{literal}[{body}]" for literal, (body, _) in parts) + suffix
    expected = [
        "".join(literal + value for (literal, _), value in zip(parts, combo, strict=True)) + suffix
        for combo in itertools.product(*(values for _, (_, values) in parts))
    ]
    assert _hostlist.expand(text, source="X") == expected
    assert _hostlist.count(text, source="X") == len(expected)
    assert _hostlist.first_host(text, source="X") == expected[0]


@given(st.lists(st.tuples(_name, bracket()), min_size=1, max_size=4))
def test_comma_separated_groups_keep_their_written_order(
    groups: list[tuple[str, tuple[str, list[str]]]],
) -> None:
    text = ",".join(f"{name}[{body}]" for name, (body, _) in groups)
    expected = [name + value for name, (_, values) in groups for value in values]
    assert _hostlist.expand(text, source="X") == expected


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("rack[1-2]-n[07-08]", ["rack1-n07", "rack1-n08", "rack2-n07", "rack2-n08"]),
        (
            "login1,gpu[8-10],cpu[098-100]",
            ["login1", "gpu8", "gpu9", "gpu10", "cpu098", "cpu099", "cpu100"],
        ),
        ("x1000c0s0b0n[0-1]", ["x1000c0s0b0n0", "x1000c0s0b0n1"]),
        ("10.123.0.[1-2]", ["10.123.0.1", "10.123.0.2"]),
        ("node[7]", ["node7"]),
        ("solo", ["solo"]),
    ],
)
def test_documented_hostlist_forms_expand_as_slurm_does(text: str, hosts: list[str]) -> None:
    assert _hostlist.expand(text, source="SLURM_JOB_NODELIST") == hosts


def test_first_host_and_count_do_not_expand_huge_lists() -> None:
    text = "r[000-999]-n[0000-9999]"  # ten million names
    assert _hostlist.first_host(text, source="X") == "r000-n0000"
    assert _hostlist.count(text, source="X") == 10_000_000


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "empty"),
        ("node[1-", "never closed"),
        ("node1-]", "without '['"),
        ("node[[1]]", "nested"),
        ("node[3-1]", "backwards"),
        ("node[a-b]", "digits"),
        ("node[1-2:2]", "digits"),
        ("node[]", "digits"),
        (" , ", "empty"),
        ("node[1, 2]", "white space inside brackets"),
    ],
)
def test_malformed_hostlists_are_errors_naming_the_variable_and_value(text: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _hostlist.expand(text, source="SLURM_STEP_NODELIST")
    message = str(caught.value)
    assert f"SLURM_STEP_NODELIST={text!r}" in message
    assert why in message
    assert "node[01-04,07]" in message  # what is accepted


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("alpha, host[5-6]", ["alpha", "host5", "host6"]),
        ("a,,b", ["a", "b"]),
        ("a,", ["a"]),
        (" node1\tnode2\n", ["node1", "node2"]),
    ],
)
def test_hostlists_accept_white_space_and_empty_items_as_slurm_does(
    text: str, hosts: list[str]
) -> None:
    assert _hostlist.expand(text, source="X") == hosts


@given(st.lists(st.sampled_from(["a", "[1]", "[2-3]", "[07,9]", "-", ",", " "]), max_size=200))
def test_many_brackets_in_one_name_parse_like_the_reference_product(parts: list[str]) -> None:
    # Many brackets in one name once cost quadratic time (each one re-copied the rest of the
    # text); this checks the one-pass parser against a product computed here.
    text = "".join(parts)
    bracket_values = {"[1]": ["1"], "[2-3]": ["2", "3"], "[07,9]": ["07", "9"]}
    names: list[list[str]] = []
    choices: list[list[str]] = []
    for part in [*parts, ","]:
        if part in (",", " "):
            if choices:
                names.append(["".join(c) for c in itertools.product(*choices)])
            choices = []
        else:
            choices.append(bracket_values.get(part, [part]))
    if not names:
        with pytest.raises(ConfigError, match="empty"):
            _hostlist.count(text, source="X")
        return
    expected = [host for group in names for host in group]
    assert _hostlist.count(text, source="X") == len(expected)
    assert _hostlist.first_host(text, source="X") == expected[0]
    if len(expected) < 5000:
        assert _hostlist.expand(text, source="X") == expected


@given(st.text(alphabet="ab1[]-, ", max_size=12))
def test_the_parser_either_expands_or_raises_config_error_never_anything_else(text: str) -> None:
    try:
        hosts = _hostlist.expand(text, source="X")
    except ConfigError as exc:
        assert "X=" in str(exc)
    else:
        assert hosts and all(hosts)
        assert _hostlist.first_host(text, source="X") == hosts[0]


def test_compress_refuses_names_a_hostlist_cannot_hold() -> None:
    for bad in ["", "a,b", "a[1]", "a b"]:
        with pytest.raises(ValueError, match="cannot be written"):
            _hostlist.compress([bad])


# -- Slurm's per-node counts ----------------------------------------------------------------------


def _compress_counts(counts: list[int]) -> str:
    """Slurm's writer for per-node counts: runs of equal counts as ``N(xK)``."""
    return ",".join(
        f"{value}(x{len(run)})" if len(run) > 1 else str(value)
        for value, run in ((v, list(g)) for v, g in itertools.groupby(counts))
    )


@given(st.lists(st.integers(min_value=1, max_value=128), min_size=1, max_size=50))
@example([2, 2, 2, 1])
def test_per_node_counts_round_trip_through_slurms_compressed_form(counts: list[int]) -> None:
    parsed = parse_counts(_compress_counts(counts), source="SLURM_TASKS_PER_NODE")
    assert parsed.expand() == counts
    assert [parsed[node] for node in range(len(parsed))] == counts
    assert parsed.total() == sum(counts)


def test_a_huge_repeat_count_is_kept_compressed_not_expanded() -> None:
    parsed = parse_counts("1(x2000000000)", source="SLURM_STEP_TASKS_PER_NODE")
    assert len(parsed) == 2_000_000_000
    assert parsed.total() == 2_000_000_000
    assert parsed[1_999_999_999] == 1


@pytest.mark.parametrize(
    "text", ["", "2(x3", "2(3)", "x3", "0", "2(x0)", "2,,1", "-1", "1.5", "1(x1e10)"]
)
def test_malformed_per_node_counts_name_the_variable_and_show_the_accepted_form(
    text: str,
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_counts(text, source="SLURM_STEP_TASKS_PER_NODE")
    assert f"SLURM_STEP_TASKS_PER_NODE={text!r}" in str(caught.value)
    assert "2(x3),1" in str(caught.value)


# -- integers -------------------------------------------------------------------------------------

# No blanks or line breaks around the digits: no launcher writes them (``int()`` takes "0\n" for 0).
_VALID_INT = re.compile(r"\+?[0-9]+", re.ASCII)


@given(st.text(max_size=12))
@example("٣")  # an Arabic-Indic digit: int() takes it, no launcher writes it
@example(" 7 ")
@example("0\n")
@example("+3")
@example("-1")
@example("1e3")
def test_launcher_integers_are_ascii_digits_or_an_error_naming_variable_and_value(
    text: str,
) -> None:
    env = {"SLURM_PROCID": text}
    if _VALID_INT.fullmatch(text):
        assert read_int(env, "SLURM_PROCID") == int(text)
    else:
        with pytest.raises(ConfigError) as caught:
            read_int(env, "SLURM_PROCID")
        assert f"SLURM_PROCID={text!r}" in str(caught.value)
        assert "integer >= 0" in str(caught.value)
        if text.strip() != text and _VALID_INT.fullmatch(text.strip()):
            assert "without blanks or line breaks around it" in str(caught.value)


@pytest.mark.parametrize("value", ["100000000000000000000", "2147483648", "7" * 5000])
def test_ranks_beyond_what_torch_can_hold_are_range_errors_naming_the_variable(
    value: str,
) -> None:
    with pytest.raises(ConfigError) as caught:
        accelbackends.Registry(
            env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1", "RANK": value, "WORLD_SIZE": "2"}
        ).cluster_environment()
    message = str(caught.value)
    assert message.startswith("RANK=")
    assert "out of range; use an integer from 0 to 2147483647" in message
    assert len(message) < 200  # a 5,000-digit value is not echoed whole


@given(st.integers(min_value=-10, max_value=70000))
def test_ports_outside_1_to_65535_are_errors_naming_the_variable(port: int) -> None:
    env = {"MASTER_PORT": str(port)}
    if 0 < port < 65536:
        assert read_port(env, "MASTER_PORT") == port
    else:
        with pytest.raises(ConfigError, match="MASTER_PORT="):
            read_port(env, "MASTER_PORT")


@given(st.text(min_size=1, max_size=40))
def test_derived_ports_are_deterministic_and_below_the_ephemeral_range(job_id: str) -> None:
    port = port_from_id(job_id)
    assert port == port_from_id(job_id)
    assert 20000 <= port < 30000


@settings(deadline=None)  # builds a registry per example; timing is not what is tested
@given(
    rank=st.integers(min_value=0, max_value=64),
    world=st.integers(min_value=1, max_value=64),
    local_world=st.integers(min_value=1, max_value=8),
)
def test_rank_and_sizes_are_accepted_exactly_when_consistent_else_both_variables_named(
    rank: int, world: int, local_world: int
) -> None:
    env = {
        "ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1",
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(world),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % local_world),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_world),
        "MASTER_ADDR": "node01",
    }
    registry = accelbackends.Registry(env=env)
    if rank < world and local_world <= world:
        info = registry.cluster_environment()
        assert (info.rank, info.world_size, info.node_rank) == (rank, world, rank // local_world)
    else:
        with pytest.raises(ConfigError) as caught:
            registry.cluster_environment()
        message = str(caught.value)
        assert "OMPI_COMM_WORLD_SIZE" in message
        assert "OMPI_COMM_WORLD_RANK" in message or "OMPI_COMM_WORLD_LOCAL_SIZE" in message
