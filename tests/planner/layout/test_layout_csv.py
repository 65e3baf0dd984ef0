"""CSV interchange and the `arenaplan layout` command: round trip, bad input, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arenaplan.cli import main
from planner.errors import InvalidInputError
from planner.layout import (
    Buffer,
    check_layout,
    format_layout_csv,
    parse_buffers_csv,
    plan_layout,
    read_buffers_csv,
)

GOOD = "id,lower,upper,size\na,0,3,100\nb,2,5,64\nc,3,6,128\n"


def test_round_trip_keeps_buffers_and_offsets(tmp_path: Path) -> None:
    buffers = parse_buffers_csv(GOOD + "d,1,2,10\n")
    layout = plan_layout(buffers)
    text = format_layout_csv(buffers, layout)
    assert text.splitlines()[0] == "id,lower,upper,size,offset"
    back = parse_buffers_csv(text)
    assert [(b.id, b.lower, b.upper, b.size) for b in back] == [
        (b.id, b.lower, b.upper, b.size) for b in buffers
    ]
    assert {b.id: b.offset for b in back} == layout.offsets
    # read back, the offsets are pre-placed: planning again keeps them
    again = plan_layout(back)
    assert again.offsets == layout.offsets
    assert check_layout(back, again) == []


def test_optional_columns_and_blank_cells() -> None:
    text = "id,lower,upper,size,alignment,offset,zone\n" \
           "p,0,9,100,,0,\nq,1,2,10,256,,\nw,0,9,64,,,persistent\n"
    with pytest.raises(InvalidInputError, match="inside the persistent zones"):
        plan_layout(parse_buffers_csv(text))
    buffers = parse_buffers_csv(text.replace("p,0,9,100,,0,", "p,0,9,100,,128,"))
    assert buffers[0] == Buffer("p", 0, 9, 100, offset=128)
    assert buffers[1] == Buffer("q", 1, 2, 10, alignment=256)
    assert buffers[2] == Buffer("w", 0, 9, 64, zone="persistent")
    header = format_layout_csv(buffers, plan_layout(buffers)).splitlines()[0]
    assert header == "id,lower,upper,size,alignment,offset,zone"


BAD = [
    ("", "empty"),
    ("id,lower,size\na,0,1\n", "missing column(s) 'upper'"),
    ("id,lower,upper,size,colour\na,0,1,1,red\n", "unknown column(s) 'colour'"),
    ("id,lower,upper,size\na,0,1,1.5\n", "line 2 (id 'a'): column 'size' must be an integer"),
    ("id,lower,upper,size\na,0,x,8\n", "column 'upper' must be an integer"),
    ("id,lower,upper,size\na,0,1,8\nb,0,1,8\na,2,3,8\n", "line 4: duplicate id 'a'"),
    ("id,lower,upper,size\na,0,1,0\n", "size 0 must be positive"),
    ("id,lower,upper,size\na,0,1,-5\n", "size -5 must be positive"),
    ("id,lower,upper,size\na,3,3,8\n", "lower 3 must be less than upper 3"),
    ("id,lower,upper,size\na,-1,3,8\n", "lower -1 is negative"),
    ("id,lower,upper,size,alignment\na,0,1,8,48\n", "alignment 48 is not a positive power"),
    ("id,lower,upper,size,alignment\na,0,1,8,0\n", "alignment 0 is not a positive power"),
    ("id,lower,upper,size,alignment,offset\na,0,1,8,64,32\n",
     "offset 32 is not a multiple of the alignment 64"),
    ("id,lower,upper,size\na,0,1\n", "line 2: 3 values for 4 columns"),
    ("id,lower,upper,size\n,0,1,8\n", "line 2: empty id"),
    ("id,lower,upper,size\na,0,,8\n", "missing value in column 'upper'"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_csv_is_rejected_with_its_reason(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=None) as info:
        parse_buffers_csv(text, default_alignment=64)
    assert message in str(info.value)


@pytest.mark.parametrize(("text", "message"), BAD)
def test_cli_exit_code_2_on_bad_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    src = tmp_path / "in.csv"
    src.write_text(text)
    code = main(["layout", "--csv", str(src), "-o", str(tmp_path / "out.csv")])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()


def test_cli_bad_alignment_option_and_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.csv"
    src.write_text(GOOD)
    out = str(tmp_path / "out.csv")
    assert main(["layout", "--csv", str(src), "-o", out, "--alignment", "48"]) == 2
    assert "power of two" in capsys.readouterr().err
    assert main(["layout", "--csv", str(tmp_path / "nope.csv"), "-o", out]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_cli_aligns_to_one_byte_unless_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No alignment column: exact byte sizes (the format's convention); --alignment overrides,
    and an offset that is not a multiple of it is then rejected."""
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text("id,lower,upper,size\na,0,2,100\nb,1,3,36\nc,2,3,20\n")
    assert main(["layout", "--csv", str(src), "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["arena_size"] == 136
    assert main(["layout", "--csv", str(src), "-o", str(out), "--json", "--alignment", "64"]) == 0
    assert json.loads(capsys.readouterr().out)["arena_size"] == 192
    src.write_text("id,lower,upper,size,offset\na,0,2,100,36\nb,1,3,36,\n")
    assert main(["layout", "--csv", str(src), "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["arena_size"] == 136
    assert main(["layout", "--csv", str(src), "-o", str(out), "--alignment", "64"]) == 2
    assert "not a multiple of the alignment 64" in capsys.readouterr().err


def test_cli_writes_a_valid_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text(GOOD)
    assert main(["layout", "--csv", str(src), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "arena 192 bytes, lower bound 192 bytes, gap 0.00%, OPTIMAL" in printed
    buffers = read_buffers_csv(str(src))
    placed = read_buffers_csv(str(out))
    assert check_layout(buffers, {b.id: b.offset for b in placed}) == []

    assert main(["layout", "--csv", str(src), "-o", str(out), "--json", "--workers", "2",
                 "--seed", "3", "--time-limit", "2", "--capacity", "1000"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["arena_size"] <= 1000 and summary["status"] == "OPTIMAL"
    assert summary["lower_bound"] == 192 and summary["gap"] == 0.0


def test_cli_exit_3_when_capacity_is_below_the_live_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.csv"
    src.write_text(GOOD)
    code = main(["layout", "--csv", str(src), "-o", str(tmp_path / "o.csv"), "--capacity", "191"])
    assert code == 3
    err = capsys.readouterr().err
    assert "infeasible" in err and "needs at least 192 bytes" in err


def test_cli_exit_3_when_the_solver_proves_the_capacity_too_small(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Live bytes peak at 192, but the pre-placed f splits the arena: g needs 128 contiguous
    bytes, which only exist above f, so 256 bytes are needed and 192 is proven too small."""
    src = tmp_path / "in.csv"
    src.write_text("id,lower,upper,size,offset\nf,0,2,64,64\ng,0,1,128,\nh,1,2,64,\n")
    out = str(tmp_path / "o.csv")
    assert main(["layout", "--csv", str(src), "-o", out, "--capacity", "192"]) == 3
    err = capsys.readouterr().err
    assert "proven by the exact solver" in err and "the smallest arena is 256 bytes" in err
    assert main(["layout", "--csv", str(src), "-o", out, "--capacity", "256"]) == 0
