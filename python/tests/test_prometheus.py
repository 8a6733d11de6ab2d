"""`calo record --serve` scraped by a real Prometheus server (Debian's `prometheus`) on loopback: the values
come back through Prometheus's HTTP API (/api/v1/query) while a child emits step markers."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calo_test_env import HERE, calo_binary, child_env  # noqa: E402

# 150 steps of ~0.1 s: the child runs ~11 s, so it is still stepping when the test asks the counter to grow
# after its other queries (with 60 steps, ~4.5 s of child, a loaded 2-core CI run saw it end first).
STEPS = 150
STEP_S = 0.1  # 10 steps/s: several 1 s scrapes see the run progress


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.headers.get("Content-Type", ""), response.read().decode()


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except OSError as error:  # not up yet
            last_error = error
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last error: {last_error})")


class PrometheusScrapesCaloRecord(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        prometheus = shutil.which("prometheus")
        if prometheus is None:
            raise AssertionError("prometheus is not installed: run scripts/install_deps.sh (Debian package "
                                 "'prometheus')")
        cls.tmp = tempfile.TemporaryDirectory(prefix="calo-prom-")
        cls.calo_port = free_port()
        cls.prometheus_port = free_port()
        config = os.path.join(cls.tmp.name, "prometheus.yml")
        with open(config, "w") as out:
            out.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                      "scrape_configs:\n  - job_name: calo\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{cls.calo_port}']\n")
        cls.prometheus_log = open(os.path.join(cls.tmp.name, "prometheus.log"), "w")
        cls.prometheus = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={cls.tmp.name}/tsdb",
             f"--web.listen-address=127.0.0.1:{cls.prometheus_port}"],
            stdout=cls.prometheus_log, stderr=subprocess.STDOUT)
        cls.api = f"http://127.0.0.1:{cls.prometheus_port}"
        wait_for(lambda: http_get(cls.api + "/-/ready")[1], 60, "Prometheus to be ready")
        run_dir = os.path.join(cls.tmp.name, "run")
        cls.recording = subprocess.Popen(
            [calo_binary(), "record", "--out", run_dir, "--quiet", "--serve", f"127.0.0.1:{cls.calo_port}",
             "--", sys.executable, os.path.join(HERE, "child_train.py"), str(STEPS), str(STEP_S * 0.75)],
            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    @classmethod
    def tearDownClass(cls):
        if cls.recording.poll() is None:
            cls.recording.kill()
        cls.recording.communicate(timeout=30)
        cls.prometheus.terminate()
        cls.prometheus.wait(timeout=30)
        cls.prometheus_log.close()
        cls.tmp.cleanup()

    def query(self, promql):
        url = self.api + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        body = json.loads(http_get(url)[1])
        self.assertEqual(body["status"], "success", body)
        return body["data"]["result"]

    def test_prometheus_reads_step_and_host_metrics_while_recording(self):
        endpoint = f"http://127.0.0.1:{self.calo_port}/metrics"
        content_type, page = wait_for(lambda: (lambda r: r if "calo_steps_total" in r[1] else None)(
            http_get(endpoint)), 30, "calo to serve step metrics")
        self.assertTrue(content_type.startswith("application/openmetrics-text"), content_type)
        self.assertTrue(page.endswith("# EOF\n"))
        self.assertIn("# TYPE calo_steps counter", page)

        # Prometheus scraped the target and stored the steps of rank 0 while the child was still running.
        steps = wait_for(lambda: self.query('calo_steps_total{rank="0"} >= 20'), 30,
                         "Prometheus to store 20 steps of rank 0")
        self.assertIsNone(self.recording.poll(), "the child should still be running")
        self.assertTrue(steps[0]["metric"]["Hostname"])
        self.assertEqual(steps[0]["metric"]["job"], "calo")

        up = self.query('up{job="calo"}')
        self.assertEqual(up[0]["value"][1], "1")

        rate = float(self.query('calo_step_rate_hz{rank="0"}')[0]["value"][1])
        self.assertGreater(rate, 5.0)   # markers every 0.1 s: 10 steps/s, less on a loaded 2-core machine
        self.assertLess(rate, 10.5)
        last_step_time = float(self.query('calo_last_step_time_s{rank="0"}')[0]["value"][1])
        self.assertGreater(last_step_time, STEP_S * 0.95)
        self.assertLess(last_step_time, STEP_S * 3)

        # The host device (no GPU on CI): its metrics come through with their calo names.
        cpu = self.query('calo_cpu_util_pct{device="cpu"}')
        self.assertEqual(len(cpu), 1)
        self.assertGreaterEqual(float(cpu[0]["value"][1]), 0.0)
        self.assertLessEqual(float(cpu[0]["value"][1]), 100.0)

        # Steps keep arriving between scrapes: the stored counter grows.
        first = float(steps[0]["value"][1])
        later = wait_for(lambda: self.query(f'calo_steps_total{{rank="0"}} > {first}'), 15,
                         "the step counter to grow")
        self.assertGreater(float(later[0]["value"][1]), first)

        out, err = self.recording.communicate(timeout=120)
        self.assertEqual(self.recording.returncode, 0, err)
        self.assertIn(f"serving live metrics at {endpoint}", err)
        # After the recording, the last value Prometheus holds is at most the steps the child made.
        final = self.query('max_over_time(calo_steps_total{rank="0"}[5m])')
        self.assertLessEqual(float(final[0]["value"][1]), STEPS)
        self.assertGreaterEqual(float(final[0]["value"][1]), float(later[0]["value"][1]))


if __name__ == "__main__":
    unittest.main()
