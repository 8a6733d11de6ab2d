"""The calo package against a real `calo record`: markers arrive and are stored as spans, and the DataFrames
of calo.load_run / calo.load_campaign hold exactly what SQL reads from run.db."""

import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import unittest

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import calo  # noqa: E402  (the package from this source tree)
from calo_test_env import calo_binary, record  # noqa: E402

STEPS = 6
STEP_S = 0.03


class RecordedRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="calo-py-")
        cls.campaign_dir = os.path.join(cls.tmp.name, "campaign")
        cls.run_dir = os.path.join(cls.campaign_dir, "a")
        cls.result = record(cls.run_dir, STEPS, STEP_S)
        if cls.result.returncode != 0:
            raise AssertionError(f"calo record failed ({cls.result.returncode}):\n{cls.result.stderr}")
        cls.second = record(os.path.join(cls.campaign_dir, "b"), 2, 0.01)
        cls.loaded = calo.load_run(cls.run_dir)
        cls.db = sqlite3.connect(os.path.join(cls.run_dir, "run.db"))

    @classmethod
    def tearDownClass(cls):
        cls.db.close()
        cls.loaded.close()
        cls.tmp.cleanup()

    def sql(self, query):
        return self.db.execute(query).fetchall()

    # --- markers arrive -------------------------------------------------------------------------------
    def test_plain_loop_steps_and_phases_are_stored_per_rank(self):
        steps = self.sql("SELECT step, t_begin_ns, t_end_ns, category FROM span "
                         "WHERE kind = 'step' AND rank = 0 ORDER BY step")
        self.assertEqual([row[0] for row in steps], list(range(STEPS)))
        for step, begin, end, category in steps:
            self.assertEqual(category, "socket")
            # compute phase (STEP_S) + STEP_S/3 after it; at most a generous scheduling margin over it
            self.assertGreaterEqual((end - begin) / 1e9, STEP_S * 4 / 3 * 0.95, f"step {step}")
            self.assertLess((end - begin) / 1e9, STEP_S * 4 / 3 + 0.5, f"step {step}")
        phases = self.sql("SELECT name, t_begin_ns, t_end_ns FROM span WHERE kind = 'phase' AND rank = 0 "
                          "ORDER BY t_begin_ns")
        self.assertEqual([row[0] for row in phases], ["compute"] * STEPS)
        for (_, step_begin, step_end, _), (_, begin, end) in zip(steps, phases):
            self.assertGreaterEqual(begin, step_begin)  # each phase lies inside its step
            self.assertLessEqual(end, step_end)

    def test_hf_callback_marks_each_optimizer_step(self):
        steps = self.sql("SELECT step FROM span WHERE kind = 'step' AND rank = 1 ORDER BY step")
        self.assertEqual([row[0] for row in steps], [0, 1, 2])

    def test_lightning_callback_spans_accumulated_batches(self):
        steps = self.sql("SELECT step, t_end_ns - t_begin_ns FROM span WHERE kind = 'step' AND rank = 2 "
                         "ORDER BY step")
        self.assertEqual([row[0] for row in steps], [0, 1, 2])
        for _, duration_ns in steps:  # two batches of STEP_S/2 each
            self.assertGreaterEqual(duration_ns / 1e9, STEP_S * 0.95)

    def test_unparsable_line_is_reported_as_event(self):
        messages = [row[0] for row in self.sql("SELECT message FROM event WHERE source = 'markers'")]
        self.assertTrue(any("1 marker line(s) rejected" in m for m in messages), messages)

    def test_summary_counts_the_steps_of_each_rank(self):
        counts = dict(self.sql("SELECT scope, value FROM summary WHERE key = 'steps'"))
        self.assertEqual(counts, {"rank0": STEPS, "rank1": 3, "rank2": 3})

    # --- DataFrames match the SQL -----------------------------------------------------------------------
    def test_samples_long_match_sql(self):
        long = self.loaded.samples()
        rows = self.sql("SELECT s.t_ns, s.device_idx, m.name, m.unit, s.value FROM sample s "
                        "JOIN metric m ON m.id = s.metric_id ORDER BY s.t_ns, s.device_idx, s.metric_id, s.rowid")
        self.assertGreater(len(rows), 0)
        self.assertEqual(len(long), len(rows))
        self.assertEqual(list(long[["t_ns", "device_idx", "metric", "unit", "value"]].itertuples(index=False,
                                                                                                    name=None)),
                         rows)
        self.assertTrue((long["t_s"] == long["t_ns"] / 1e9).all())
        self.assertEqual(set(long["device"]), {"cpu"})  # no GPU on the CI machine: the host device only

    def test_samples_wide_hold_every_sample_once(self):
        long = self.loaded.samples()
        wide = self.loaded.samples(form="wide")
        metric_columns = [c for c in wide.columns if c not in ("device_idx", "device", "t_ns", "t_s")]
        self.assertEqual(sorted(metric_columns), sorted(long["metric"].unique()))
        self.assertEqual(int(wide[metric_columns].notna().sum().sum()),
                         len(long.drop_duplicates(["device_idx", "t_ns", "metric"])))
        for metric in metric_columns:
            expected = self.sql(f"SELECT sum(value), count(*) FROM sample WHERE metric_id = "
                                f"(SELECT id FROM metric WHERE name = '{metric}')")[0]
            self.assertAlmostEqual(wide[metric].sum(), expected[0], places=6)
            self.assertEqual(wide.attrs["units"][metric], self.loaded.units[metric])

    def test_sample_selection_by_metric_device_and_time(self):
        metric = self.loaded.metrics["name"].iloc[0]
        chosen = self.loaded.samples(metrics=metric, devices="cpu", t_begin_s=0.1, t_end_s=0.5)
        count = self.sql(f"SELECT count(*) FROM sample s JOIN metric m ON m.id = s.metric_id WHERE m.name = "
                         f"'{metric}' AND s.t_ns >= 100000000 AND s.t_ns < 500000000")[0][0]
        self.assertEqual(len(chosen), count)
        with self.assertRaisesRegex(ValueError, "not in this run"):
            self.loaded.samples(metrics="no_such_metric_w")

    def test_spans_summary_devices_events_match_sql(self):
        spans = self.loaded.spans
        rows = self.sql("SELECT rank, kind, name, t_begin_ns, t_end_ns, step FROM span "
                        "ORDER BY t_begin_ns, rank, device_idx, rowid")
        self.assertEqual(len(spans), len(rows))
        as_tuples = [(None if pd.isna(r) else int(r), k, n, b, e, None if pd.isna(s) else int(s))
                     for r, k, n, b, e, s in spans[["rank_idx", "kind", "name", "t_begin_ns", "t_end_ns",
                                                    "step"]].itertuples(index=False, name=None)]
        self.assertEqual(as_tuples, rows)
        self.assertEqual(len(self.loaded.steps), STEPS + 6)
        # The table's columns, then what each scope is about (device_idx, device, node, rank_idx, phase).
        self.assertEqual(list(self.loaded.summary.columns[:4]), ["scope", "key", "value", "unit"])
        self.assertEqual(list(self.loaded.summary.iloc[:, :4].itertuples(index=False, name=None)),
                         self.sql("SELECT scope, key, value, unit FROM summary ORDER BY rowid"))
        self.assertEqual(list(self.loaded.devices[["idx", "kind", "name"]].itertuples(index=False, name=None)),
                         self.sql("SELECT idx, kind, name FROM device ORDER BY idx"))
        self.assertEqual(len(self.loaded.events), self.sql("SELECT count(*) FROM event")[0][0])
        self.assertEqual(self.loaded.info["kind"], "record")
        self.assertGreater(self.loaded.info["duration_s"], STEPS * STEP_S)

    def test_campaign_concatenates_runs(self):
        self.assertEqual(self.second.returncode, 0, self.second.stderr)
        campaign = calo.load_campaign(self.campaign_dir)
        self.assertEqual(sorted(campaign.runs), ["a", "b"])
        summary = campaign.summary
        self.assertEqual(len(summary), sum(len(r.summary) for r in campaign.runs.values()))
        steps = campaign.spans.query("kind == 'step' and rank_idx == 0").groupby("run").size().to_dict()
        self.assertEqual(steps, {"a": STEPS, "b": 2})
        self.assertEqual(list(campaign.info["run"]), ["a", "b"])
        self.assertEqual(len(campaign.samples()), sum(len(r.samples()) for r in campaign.runs.values()))

    def test_merged_nodes_keep_their_wall_clock_order(self):
        # The README's multi-node recipe: one calo record per node, then calo merge. Run b was recorded after
        # run a finished, so once merged on the nodes' wall clocks all of b's steps come after a's.
        merged = os.path.join(self.tmp.name, "merged")
        out = subprocess.run([calo_binary(), "merge", os.path.join(self.campaign_dir, "a"),
                              os.path.join(self.campaign_dir, "b"), "--out", merged],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        merged_steps = calo.load_run(merged).steps.sort_values("t_begin_ns")
        a_steps = calo.load_run(self.run_dir).steps
        b_steps = calo.load_run(os.path.join(self.campaign_dir, "b")).steps
        self.assertEqual(len(merged_steps), len(a_steps) + len(b_steps))
        b_in_merged = merged_steps.tail(len(b_steps))
        self.assertGreater(int(b_in_merged["t_begin_ns"].min()), int(a_steps["t_end_ns"].max()))


class OutsideCaloRecord(unittest.TestCase):
    def test_markers_are_noops_without_calo(self):
        code = ("import calo, time\n"
                "assert not calo.enabled()\n"
                "assert calo.mark('begin step 1') is False\n"
                "t = time.perf_counter()\n"
                "for i in range(10000):\n"
                "    with calo.step(i):\n"
                "        pass\n"
                "print((time.perf_counter() - t) / 10000 * 1e6)\n")
        env = dict(os.environ)
        env.pop("CALO_MARKER_SOCKET", None)
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        self.assertLess(float(out.stdout), 50.0)  # µs per marked step; a few µs on the CI machine

    def test_import_needs_neither_framework_and_builds_plain_callbacks(self):
        code = ("import sys, calo\n"
                "cb = calo.HFCallback(); lc = calo.LightningCallback()\n"
                "assert 'pandas' not in sys.modules, 'markers must not import pandas'\n"
                "print(type(cb).__mro__[1].__name__, type(lc).__mro__[1].__name__)\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        bases = out.stdout.split()
        for base in bases:  # the framework's base class where installed, object otherwise
            self.assertIn(base, ("object", "TrainerCallback", "Callback"))

    def test_serve_on_a_port_in_use_fails_before_writing(self):
        with tempfile.TemporaryDirectory() as tmp, socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            out_dir = os.path.join(tmp, "run")
            result = subprocess.run([calo_binary(), "record", "--out", out_dir, "--serve",
                                     str(busy.getsockname()[1]), "--", "true"], capture_output=True, text=True)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn("Address already in use", result.stderr)
            self.assertFalse(os.path.exists(out_dir))

    def test_phase_names_must_be_one_word(self):
        with self.assertRaisesRegex(ValueError, "one word"):
            with calo.phase("two words"):
                pass

    def test_load_run_names_a_missing_run(self):
        with self.assertRaisesRegex(FileNotFoundError, "is not a run"):
            calo.load_run("/nonexistent/run")

    def test_load_run_reads_a_folder_named_with_uri_characters_without_writing(self):
        with tempfile.TemporaryDirectory(prefix="calo-py-") as parent:
            odd = os.path.join(parent, "run#1?x")
            self.assertEqual(record(odd, 2, 0.01).returncode, 0)
            os.chmod(os.path.join(odd, "run.db"), 0o444)  # reading needs no write access
            before = sorted(os.listdir(parent))
            run = calo.load_run(odd)
            self.assertGreater(len(run.steps), 0)
            run.close()
            self.assertEqual(sorted(os.listdir(parent)), before)  # no file "run" made beside it

    def test_load_run_names_the_file_of_a_damaged_run(self):
        with tempfile.TemporaryDirectory(prefix="calo-py-") as parent:
            damaged = os.path.join(parent, "damaged")
            os.makedirs(damaged)
            with open(os.path.join(damaged, "run.db"), "wb") as file:
                file.write(b"SQLite format 3\0" + b"\x55" * 8192)
            with self.assertRaisesRegex(ValueError, "damaged/run.db"):
                calo.load_run(damaged)


if __name__ == "__main__":
    unittest.main()
