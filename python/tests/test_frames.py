"""The frames of calo.load_run / calo.load_campaign on stores the real `calo` writes (record, sim, merge, ingest,
sweep): a wall-clock time index that resample uses, summary rows that join device rows, campaign axis columns,
MFU as a fraction. Every expected value comes from SQL on run.db, campaign.json or calo's own output."""

import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
import unittest

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import calo  # noqa: E402  (the package from this source tree)
from calo_test_env import calo as run_calo, record  # noqa: E402

SIM = ["sim", "--model", "llama3-8b", "--cluster", "h100-hgx", "--no-op-spans", "--steps", "2"]
SWEEP_SPEC = """name: python-frames
model: llama3-8b
cluster: h100-hgx
gpus: 8
fixed: {zero: 3}
axes:
  layout:
    - {tp: 1}
    - {tp: 2, pp: 2}
  mbs: [1, 2]
"""
# A Kineto trace of one step and three kernels; `ts` in µs on the trace's own clock.
TRACE = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
         "deviceProperties": [{"id": 0, "name": "GPU"}],
         "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 1,
                          "ts": 10.5, "dur": 100},
                         {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "pid": 0, "tid": 7, "ts": 12,
                          "dur": 20, "args": {"device": 0, "stream": 7}},
                         {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "pid": 0, "tid": 7, "ts": 40,
                          "dur": 30, "args": {"device": 0, "stream": 7}}]}
BASE_NS = 1_700_000_000_000_000_000


def ok(result):
    if result.returncode != 0:
        raise AssertionError(f"{result.args} failed ({result.returncode}):\n{result.stderr}")
    return result


def query(run_dir, sql, params=()):
    with sqlite3.connect(os.path.join(run_dir, "run.db")) as db:
        return db.execute(sql, params).fetchall()


def wall_ns(frame):
    """The time index as int64 Unix ns."""
    return list(frame.index.asi8)


class Stores(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="calo-py-frames-")
        cls.dir = cls.tmp.name
        path = lambda name: os.path.join(cls.dir, name)  # noqa: E731
        # record: ~2.5 s of host samples and steps of three ranks; `before`/`after` bracket its start.
        cls.before_ns = time.time_ns()
        ok(record(path("rec"), 12, 0.1))
        cls.after_ns = time.time_ns()
        ok(run_calo("record", "--out", path("rec2"), "--quiet", "--", "sleep", "0.3"))
        # sim on two 8-GPU nodes: rank 9 (node 1, GPU 1) runs 15 C hotter, rank 12 (node 1, GPU 4) slower.
        ok(run_calo(*SIM, "--gpus", 16, "--tp", 8, "--hot-gpu", "9=15", "--slow-gpu", "12=0.7",
                    "--out", path("sim16")))
        ok(run_calo(*SIM, "--gpus", 8, "--zero", 3, "--out", path("sim8a")))
        ok(run_calo(*SIM, "--gpus", 8, "--zero", 3, "--hot-gpu", "3=15", "--out", path("sim8b")))
        cls.merge_records = ok(run_calo("merge", path("rec"), path("rec2"), "--out", path("rec-merged")))
        ok(run_calo("merge", path("sim8a"), path("sim8b"), "--out", path("sim-merged")))
        for name, trace in (("with-base", dict(TRACE, baseTimeNanoseconds=BASE_NS)), ("no-base", TRACE)):
            with open(path(f"{name}.json"), "w") as file:
                json.dump(trace, file)
            ok(run_calo("ingest", path(f"{name}.json"), "--out", path(f"ingest-{name}")))
        with open(path("spec.yaml"), "w") as file:
            file.write(SWEEP_SPEC)
        cls.sweep = ok(run_calo("sweep", path("spec.yaml"), "--out", path("campaign"), "--jobs", 1))
        cls.runs = {}

    @classmethod
    def tearDownClass(cls):
        for run in cls.runs.values():
            run.close()
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def run_of(self, name):
        if name not in self.runs:
            self.runs[name] = calo.load_run(self.path(name))
        return self.runs[name]

    # --- time index -------------------------------------------------------------------------------------
    def test_start_time_is_the_wall_clock_when_the_run_started(self):
        run = self.run_of("rec")
        self.assertTrue(run.info["wall_clock"])
        self.assertEqual(run.start_time.value, query(self.path("rec"), "SELECT wall_offset_ns FROM run")[0][0])
        self.assertLessEqual(self.before_ns, run.start_time.value)
        self.assertLessEqual(run.start_time.value, self.after_ns)
        self.assertEqual(str(run.start_time.tz), "UTC")

    def test_timed_frames_are_indexed_by_wall_clock(self):
        run = self.run_of("rec")
        origin = run.start_time.value
        long = run.samples()
        wide = run.samples(form="wide")
        for frame in (long, wide, run.spans, run.steps, run.events):
            self.assertEqual(frame.index.name, "time")
            self.assertEqual(str(frame.index.dtype), "datetime64[ns, UTC]")
            self.assertTrue(frame.index.is_monotonic_increasing)
        self.assertEqual(wall_ns(long), [origin + t for t in long["t_ns"]])
        self.assertEqual(wall_ns(wide), [origin + t for t in wide["t_ns"]])
        spans = run.spans
        self.assertEqual(wall_ns(spans), [origin + t for (t,) in query(
            self.path("rec"), "SELECT t_begin_ns FROM span ORDER BY t_begin_ns, rank, device_idx, rowid")])
        self.assertEqual(list(spans["time_end"].astype("int64")), [origin + t for t in spans["t_end_ns"]])
        self.assertEqual(wall_ns(run.events), [origin + t for (t,) in query(
            self.path("rec"), "SELECT t_ns FROM event ORDER BY t_ns, rowid")])
        self.assertEqual(len(run.steps), 12 + 3 + 3)

    def test_wide_samples_resample_by_the_second(self):
        run = self.run_of("rec")
        per_second = run.samples(form="wide", devices="cpu").resample("1s").mean(numeric_only=True)
        expected = query(self.path("rec"),
                         "SELECT (s.t_ns + ?) / 1000000000, avg(s.value) FROM sample s JOIN metric m "
                         "ON m.id = s.metric_id WHERE m.name = 'cpu_util_pct' GROUP BY 1 ORDER BY 1",
                         (run.start_time.value,))
        self.assertGreaterEqual(len(expected), 2)  # ~2.5 s of samples
        got = per_second["cpu_util_pct"].dropna()
        self.assertEqual([t.value // 10**9 for t in got.index], [second for second, _ in expected])
        for value, (_, mean) in zip(got, expected):
            self.assertAlmostEqual(value, mean, places=9)
        # Bins from the run's start instead of whole seconds: origin=run.start_time.
        from_start = run.samples(form="wide", devices="cpu").resample("1s", origin=run.start_time).mean(
            numeric_only=True)
        self.assertEqual(from_start.index[0], run.start_time)

    def test_sim_runs_are_indexed_by_simulated_time(self):
        # The wall clock when the simulator ran says nothing of a simulated step: time counts from the epoch.
        run = self.run_of("sim16")
        self.assertFalse(run.info["wall_clock"])
        self.assertEqual(run.start_time.value, 0)
        steps = run.steps
        self.assertEqual(wall_ns(steps), list(steps["t_begin_ns"]))
        self.assertEqual(steps["t_begin_s"].iloc[0], 0.0)
        self.assertAlmostEqual(steps["t_end_s"].iloc[-1],
                               run.summary.set_index(["scope", "key"]).loc[("run", "iteration_s"), "value"] * 2,
                               delta=1e-6)

    def test_rank_column_is_not_shadowed_by_a_dataframe_method(self):
        spans = self.run_of("rec").spans
        self.assertIsInstance(spans.rank_idx, pd.Series)  # spans.rank would be DataFrame.rank, a method
        self.assertNotIn("rank", spans.columns)
        self.assertEqual(sorted(spans.rank_idx.dropna().unique()), [0, 1, 2])

    def test_resample_per_device_of_a_multi_gpu_run(self):
        run = self.run_of("sim16")
        wide = run.samples(form="wide")
        per_device = wide.groupby("device").resample("100ms").max(numeric_only=True)
        self.assertEqual(sorted(per_device.index.get_level_values("device").unique()),
                         sorted(run.devices["label"]))
        peak = per_device["temp_gpu_c"].groupby(level="device").max()
        self.assertEqual(peak.idxmax(), "node1/gpu1")  # rank 9, the hot GPU

    def test_merged_nodes_start_times_match_calo_merge_shift(self):
        shift = re.search(r"node 1: .*clock shift ([+-][0-9.]+) s", self.merge_records.stdout)
        self.assertIsNotNone(shift, self.merge_records.stdout)
        first, second = self.run_of("rec"), self.run_of("rec2")
        self.assertAlmostEqual((second.start_time - first.start_time).value / 1e9, float(shift.group(1)),
                               delta=0.51e-6)  # merge prints µs
        self.assertEqual(self.run_of("rec-merged").start_time, first.start_time)

    def test_schema_1_record_runs_get_the_same_wall_clock_as_calo_reads(self):
        # Schema 1 stored the wall clock at the host's CLOCK_MONOTONIC zero in record runs (docs/RUN_STORE.md);
        # the C++ reader adds started_ns back, and so must Python: both see rec2 start where it did.
        old = self.path("rec2-schema1")
        shutil.copytree(self.path("rec2"), old)
        with sqlite3.connect(os.path.join(old, "run.db")) as db:
            db.execute("UPDATE run SET wall_offset_ns = wall_offset_ns - started_ns")
            db.execute("PRAGMA user_version = 1")
        db.close()
        migrated = calo.load_run(old)
        self.assertEqual(migrated.info["schema_version"], 1)
        self.assertEqual(migrated.start_time, self.run_of("rec2").start_time)
        self.assertEqual(wall_ns(migrated.samples()), wall_ns(self.run_of("rec2").samples()))
        migrated.close()
        merged = ok(run_calo("merge", self.path("rec"), old, "--out", self.path("rec-merged-schema1")))
        shift = float(re.search(r"node 1: .*clock shift ([+-][0-9.]+) s", merged.stdout).group(1))
        self.assertAlmostEqual((self.run_of("rec2").start_time - self.run_of("rec").start_time).value / 1e9,
                               shift, delta=0.51e-6)

    def test_ingested_trace_is_on_the_wall_clock_only_with_a_base_time(self):
        with_base, no_base = self.run_of("ingest-with-base"), self.run_of("ingest-no-base")
        self.assertTrue(with_base.info["wall_clock"])
        self.assertEqual(with_base.start_time.value, BASE_NS + 10_500)  # the first event, at ts 10.5 µs
        # No baseTimeNanoseconds: the store holds the trace's own clock (10.5 µs), no Unix time. Times count
        # from 1970-01-01T00:00Z, i.e. the time index is the time since the run started.
        self.assertEqual(query(self.path("ingest-no-base"), "SELECT wall_offset_ns FROM run")[0][0], 10_500)
        self.assertFalse(no_base.info["wall_clock"])
        self.assertEqual(no_base.start_time, pd.Timestamp(0, tz="UTC"))
        self.assertEqual(wall_ns(no_base.spans), list(no_base.spans["t_begin_ns"]))
        self.assertEqual(list(no_base.spans["t_begin_ns"]), list(with_base.spans["t_begin_ns"]))

    # --- summary rows join device rows ------------------------------------------------------------------
    def test_sim_summary_rows_name_the_devices_of_each_node(self):
        run = self.run_of("sim16")
        summary = run.summary
        gpu_rows = summary[summary["scope"].str.fullmatch(r"gpu\d+")]
        self.assertEqual(len(gpu_rows), 16 * 6)
        for scope, idx, device, node in gpu_rows[["scope", "device_idx", "device", "node"]].itertuples(
                index=False):
            rank = int(scope[3:])
            self.assertEqual((idx, device, node), (rank, f"node{rank // 8}/gpu{rank % 8}", rank // 8))
        run_rows = summary[summary["scope"] == "run"]
        self.assertTrue(run_rows[["device_idx", "device", "node", "rank_idx"]].isna().all().all())
        joined = gpu_rows.merge(run.devices, on="device")
        self.assertEqual(len(joined), len(gpu_rows))
        self.assertTrue((joined["device_idx_x"] == joined["device_idx_y"]).all())
        self.assertTrue((joined["node_x"] == joined["node_y"]).all())

    def test_summary_joins_samples_on_device(self):
        run = self.run_of("sim16")
        peaks = run.samples(form="wide").groupby("device", as_index=False).agg(
            temp_gpu_c=("temp_gpu_c", "max"), energy_j=("energy_j", "max"))
        for key, metric in (("max_die_c", "temp_gpu_c"), ("energy_j", "energy_j")):
            rows = run.summary[(run.summary["key"] == key) & run.summary["device"].notna()]
            joined = rows.merge(peaks, on="device")
            self.assertEqual(len(joined), 16, key)
            for value, sampled in zip(joined["value"], joined[metric]):
                self.assertAlmostEqual(value, sampled, delta=1e-6 * abs(value), msg=key)
        die = run.summary[(run.summary["key"] == "max_die_c") & run.summary["device"].notna()]
        self.assertEqual(die.set_index("device")["value"].idxmax(), "node1/gpu1")  # --hot-gpu 9
        energy = run.summary[(run.summary["key"] == "energy_j") & (run.summary["node"] == 1)]
        self.assertEqual(energy.set_index("device")["value"].idxmax(), "node1/gpu4")  # --slow-gpu 12

    def test_merged_run_scopes_resolve_per_node(self):
        run = self.run_of("sim-merged")
        summary = run.summary
        node1 = summary[summary["scope"].str.fullmatch(r"node1/gpu\d+")]
        self.assertEqual(len(node1), 8 * 6)
        for scope, idx, device, node in node1[["scope", "device_idx", "device", "node"]].itertuples(index=False):
            slot = int(scope.split("gpu")[1])
            self.assertEqual((idx, device, node), (8 + slot, f"node1/gpu{slot}", 1))
        die = summary[summary["key"] == "max_die_c"].dropna(subset=["device"]).set_index("device")["value"]
        self.assertEqual(die.idxmax(), "node1/gpu3")  # sim8b's --hot-gpu 3
        self.assertEqual(len(summary[summary["key"] == "max_die_c"].merge(run.devices, on="device")), 16)
        run_rows = summary[summary["scope"] == "node1/run"]
        self.assertTrue((run_rows["node"] == 1).all() and run_rows["device"].isna().all())

    def test_record_summary_scopes_name_ranks(self):
        summary = self.run_of("rec").summary
        steps = summary[summary["key"] == "steps"]
        self.assertEqual(dict(zip(steps["scope"], steps["rank_idx"])), {"rank0": 0, "rank1": 1, "rank2": 2})
        self.assertEqual(dict(zip(steps["rank_idx"], steps["value"])), {0: 12, 1: 3, 2: 3})
        self.assertTrue(steps["device"].isna().all())
        merged = self.run_of("rec-merged").summary
        ranks = merged[merged["key"] == "steps"]
        self.assertEqual(sorted(zip(ranks["node"], ranks["rank_idx"])), [(0, 0), (0, 1), (0, 2)])
        self.assertEqual(list(merged[["scope", "key", "value", "unit"]].itertuples(index=False, name=None)),
                         query(self.path("rec-merged"),
                               "SELECT scope, key, value, unit FROM summary ORDER BY rowid"))

    # --- campaigns --------------------------------------------------------------------------------------
    def test_campaign_frames_carry_axis_values(self):
        with open(self.path("campaign/campaign.json")) as file:
            index = json.load(file)
        campaign = calo.load_campaign(self.path("campaign"))
        self.assertEqual(campaign.axes, index["axes"])
        self.assertEqual(campaign.axes, ["layout", "mbs"])
        done = {p["run_dir"]: dict(p["axis_values"]) for p in index["points"] if p["status"] == "done"}
        self.assertEqual(sorted(campaign.runs), sorted(done))
        for name, frame in (("info", campaign.info), ("devices", campaign.devices), ("spans", campaign.spans),
                            ("steps", campaign.steps), ("summary", campaign.summary),
                            ("samples", campaign.samples(form="wide"))):
            self.assertEqual(list(frame.columns[:3]), ["run", "layout", "mbs"], name)
            self.assertEqual(str(frame["mbs"].dtype), "Int64", name)
            values = frame[["run", "layout", "mbs"]].drop_duplicates()
            self.assertEqual({r: (lay, str(m)) for r, lay, m in values.itertuples(index=False)},
                             {r: (v["layout"], v["mbs"]) for r, v in done.items()}, name)
        for run_name, run in campaign.runs.items():  # the run's own layout agrees with its axis values
            layout = run.info["config"]["layout"]
            row = campaign.info[campaign.info["run"] == run_name].iloc[0]
            self.assertEqual(row["mbs"], layout["micro_batch"])
            self.assertEqual(row["layout"], "-".join(f"{k}{layout[k]}" for k in ("tp", "pp") if layout[k] > 1)
                             or "tp1")
        self.assertEqual(str(campaign.spans.index.dtype), "datetime64[ns, UTC]")

    def test_campaign_points_and_mfu_as_a_fraction(self):
        campaign = calo.load_campaign(self.path("campaign"))
        points = campaign.points
        self.assertEqual(list(points["status"]), ["done", "skipped", "done", "done"])
        skipped = points[points["status"] == "skipped"].iloc[0]
        self.assertTrue(pd.isna(skipped["run"]))
        self.assertIn("does not fit memory", skipped["reason"])
        self.assertNotIn("mfu", points.columns)
        # The sweep's table prints MFU %; Python holds the fraction, in the store's summary row and the points.
        printed = {}
        for line in self.sweep.stdout.splitlines():
            cells = line.split()
            if len(cells) > 3 and cells[1] == "done":
                printed[cells[0]] = float(cells[3])
        self.assertEqual(len(printed), 3)
        for point in points[points["status"] == "done"].itertuples():
            self.assertAlmostEqual(point.mfu_fraction * 100, printed[point.point], delta=0.051)
            row = campaign.summary[(campaign.summary["run"] == point.run) & (campaign.summary["key"] == "mfu")]
            self.assertEqual(list(row["unit"]), ["fraction"])
            self.assertAlmostEqual(row["value"].iloc[0], point.mfu_fraction, places=12)

    def test_runs_outside_a_campaign_have_no_axis_values(self):
        campaign = calo.load_campaign(self.dir)  # the campaign below plus every other run here
        info = campaign.info.set_index("run")
        self.assertEqual(info.loc["campaign/tp1-mbs1", "mbs"], 1)
        self.assertTrue(pd.isna(info.loc["rec", "mbs"]) and pd.isna(info.loc["rec", "layout"]))
        self.assertEqual(list(campaign.points["run"].dropna()),
                         ["campaign/tp1-mbs1", "campaign/tp2-pp2-mbs1", "campaign/tp2-pp2-mbs2"])


if __name__ == "__main__":
    unittest.main()
