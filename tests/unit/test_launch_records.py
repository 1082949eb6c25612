"""Record formats: cycle and outcome records round-trip; torchelastic error files parse."""

from __future__ import annotations

import json

from slurm_ft import records


def test_outcome_record_carries_what_templates_read(tmp_path):
    rec = records.OutcomeRecord(
        exit_code=94,
        outcome="unhealthy",
        reason="unhealthy: node3: nic: ib0 down",
        first_failure=None,
        cycles=0,
        first_cycle=None,
        last_cycle=None,
        attempt=2,
        job_id="123",
        run_id="123-a2",
        run_uuid="u",
        unhealthy_nodes=["node3"],
        time=5.0,
    )
    path = tmp_path / "outcome.json"
    records.write(path, rec)
    doc = json.loads(path.read_text())
    for key in (
        "exit_code",
        "outcome",
        "reason",
        "first_failure",
        "cycles",
        "attempt",
        "unhealthy_nodes",
        "time",
    ):
        assert key in doc
    assert (doc["exit_code"], doc["outcome"], doc["unhealthy_nodes"]) == (94, "unhealthy", ["node3"])
    assert records.OutcomeRecord.from_json(doc) == rec
    assert records.written_by(path, "u") and not records.written_by(path, "other")


def test_cycle_record_round_trip(tmp_path):
    rec = records.CycleRecord(
        cycle=3,
        attempt=1,
        restart=0,
        run_id="r",
        run_uuid="u",
        start_time=1.0,
        nodes=["a", "b"],
        world_size=4,
        nproc_per_node=2,
        master_addr="a",
        master_port=29500,
    )
    path = tmp_path / "c.json"
    records.write(path, rec)
    assert records.CycleRecord.from_json(records.read_json(path)) == rec
    assert records.read_json(tmp_path / "missing.json") is None
    (tmp_path / "torn.json").write_text('{"cycle": ')
    assert records.read_json(tmp_path / "torn.json") is None


def test_error_file_formats(tmp_path):
    p = tmp_path / "e.json"
    p.write_text(
        json.dumps({"message": {"message": "ValueError: bad", "extraInfo": {"py_callstack": "Traceback..."}}})
    )
    assert records.read_error_file(p) == ("ValueError: bad", "Traceback...")
    p.write_text(json.dumps({"message": "plain"}))
    assert records.read_error_file(p) == ("plain", None)
    p.write_text("not json")
    assert records.read_error_file(p) == (None, None)
    assert records.read_error_file(tmp_path / "none.json") == (None, None)
    p.write_text(json.dumps({"message": {"message": "m", "extraInfo": {"py_callstack": "x" * 100000}}}))
    _, tb = records.read_error_file(p)
    assert tb is not None and len(tb) == records.TRACEBACK_LIMIT + 3
