"""Run stores (run.db, docs/RUN_STORE.md) as pandas DataFrames.

Times: ``t_ns`` is nanoseconds since the run started (host CLOCK_MONOTONIC), ``t_s`` the same in seconds.
Metric names carry their unit (``power_instant_w``); the unit is also a column (long form) or ``run.units``.
"""

import json
import os
import sqlite3
import urllib.parse

import pandas as pd

RUN_DB = "run.db"


def _db_path(path):
    path = os.fspath(path)
    db = os.path.join(path, RUN_DB) if os.path.isdir(path) else path
    if not os.path.isfile(db):
        raise FileNotFoundError(f"{path} is not a run: {db} does not exist; pass a directory written by calo")
    return db


def _nullable_ints(frame, columns):
    for column in columns:
        if column in frame:
            frame[column] = frame[column].astype("Int64")
    return frame


def device_label(kind, slot, node, multi_node):
    """``gpu3`` / ``cpu``, prefixed ``node1/`` in merged multi-node runs."""
    label = f"gpu{slot}" if kind == "gpu" else "cpu"
    return f"node{node}/{label}" if multi_node else label


class Run:
    """One run: ``info`` (dict of the run row, ``config`` parsed), ``devices``, ``metrics``, ``spans``,
    ``summary``, ``events`` (DataFrames) and ``samples(form=...)``. Frames are read on first use."""

    def __init__(self, path):
        self.db_path = _db_path(path)
        self.path = os.path.dirname(os.path.abspath(self.db_path))
        # Read-only: reading never needs write access (a crashed writer's WAL is read as it is). The path is
        # percent-encoded: in a bare file: URI, "run#1/run.db" opened "run" (and created it).
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.db_path)) + "?mode=ro"
        try:
            self._connection = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as error:
            raise ValueError(f"{self.db_path}: cannot open the run database ({error})") from error
        self._cache = {}
        try:
            row = self._connection.execute(
                "SELECT kind, name, command, config_json, host, started_ns, ended_ns, wall_offset_ns, version "
                "FROM run WHERE id = 1").fetchone()
        except sqlite3.Error as error:
            self._connection.close()
            raise ValueError(f"{self.db_path}: not a readable calo run database ({error}); "
                             "pass a directory written by calo") from error
        if row is None:
            raise ValueError(f"{self.db_path} holds no run row; it was not written by calo")
        keys = ["kind", "name", "command", "config_json", "host", "started_ns", "ended_ns", "wall_offset_ns",
                "version"]
        self.info = dict(zip(keys, row))
        self.info["config"] = json.loads(self.info["config_json"] or "{}")
        self.info["duration_s"] = ((self.info["ended_ns"] - self.info["started_ns"]) / 1e9
                                   if self.info["ended_ns"] else float("nan"))

    def __repr__(self):
        return f"calo.Run({self.path!r}, kind={self.info['kind']!r}, name={self.info['name']!r})"

    def close(self):
        """Closes the database connection."""
        self._connection.close()

    def sql(self, query, params=()):
        """Any SQL query on run.db as a DataFrame; ValueError naming the file if the database is damaged."""
        try:
            return pd.read_sql_query(query, self._connection, params=params)
        except Exception as error:  # pandas wraps sqlite3's error in its own DatabaseError
            if not isinstance(error.__cause__ or error, sqlite3.DatabaseError):
                raise
            raise ValueError(f"{self.db_path}: reading failed ({error.__cause__ or error}); the run database "
                             "is damaged") from error

    def _cached(self, key, build):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    @property
    def devices(self):
        """Table ``device`` plus ``label`` (gpu0, cpu, node1/gpu0)."""
        def build():
            frame = self.sql("SELECT idx, node, slot, kind, name, uuid, pci_bus, power_limit_w, max_sm_mhz, "
                             "driver FROM device ORDER BY idx")
            multi_node = bool((frame["node"] > 0).any()) if len(frame) else False
            frame["label"] = [device_label(k, s, n, multi_node)
                              for k, s, n in zip(frame["kind"], frame["slot"], frame["node"])]
            return frame
        return self._cached("devices", build)

    @property
    def metrics(self):
        """Table ``metric``: id, name, unit, kind."""
        return self._cached("metrics", lambda: self.sql("SELECT id, name, unit, kind FROM metric ORDER BY id"))

    @property
    def units(self):
        """Metric name -> unit."""
        return dict(zip(self.metrics["name"], self.metrics["unit"]))

    @property
    def spans(self):
        """Table ``span`` (NULL = <NA>) plus t_begin_s, t_end_s, duration_s; ordered by begin time."""
        def build():
            frame = self.sql("SELECT rank, device_idx, kind, name, category, t_begin_ns, t_end_ns, step, "
                             "microbatch, stage FROM span ORDER BY t_begin_ns, rank, device_idx, rowid")
            _nullable_ints(frame, ["rank", "device_idx", "step", "microbatch", "stage"])
            frame["t_begin_s"] = frame["t_begin_ns"] / 1e9
            frame["t_end_s"] = frame["t_end_ns"] / 1e9
            frame["duration_s"] = (frame["t_end_ns"] - frame["t_begin_ns"]) / 1e9
            return frame
        return self._cached("spans", build)

    @property
    def steps(self):
        """Step spans only."""
        spans = self.spans
        return spans[spans["kind"] == "step"].reset_index(drop=True)

    @property
    def summary(self):
        """Table ``summary``: scope, key, value, unit (insertion order)."""
        return self._cached("summary", lambda: self.sql("SELECT scope, key, value, unit FROM summary ORDER BY rowid"))

    @property
    def events(self):
        """Table ``event`` plus t_s, in time order."""
        def build():
            frame = self.sql("SELECT t_ns, level, device_idx, source, message FROM event ORDER BY t_ns, rowid")
            _nullable_ints(frame, ["device_idx"])
            frame["t_s"] = frame["t_ns"] / 1e9
            return frame
        return self._cached("events", build)

    def samples(self, form="long", metrics=None, devices=None, t_begin_s=None, t_end_s=None):
        """Samples, optionally only of some metrics (names) and devices (idx or label) in [t_begin_s, t_end_s).

        ``form="long"``: one row per sample: t_ns, t_s, device_idx, device, metric, unit, kind, value,
        sensor_t_ns (<NA> where the source gives no sensor time), in time order.
        ``form="wide"``: one row per (device, read time), one column per metric (NaN where that metric was not
        read at that time; metrics have their own periods); units in ``frame.attrs["units"]`` and ``run.units``.
        """
        if form not in ("long", "wide"):
            raise ValueError(f"form={form!r}: use 'long' or 'wide'")
        where, params = [], []
        if metrics is not None:
            metrics = [metrics] if isinstance(metrics, str) else list(metrics)
            unknown = sorted(set(metrics) - set(self.metrics["name"]))
            if unknown:
                raise ValueError(f"metrics {unknown} are not in this run; it has {sorted(self.metrics['name'])}")
            where.append(f"m.name IN ({','.join('?' * len(metrics))})")
            params += metrics
        if devices is not None:
            devices = [devices] if isinstance(devices, (int, str)) else list(devices)
            by_label = dict(zip(self.devices["label"], self.devices["idx"]))
            indexes = [int(by_label[d]) if isinstance(d, str) and d in by_label else d for d in devices]
            bad = [d for d in indexes if not isinstance(d, int)]
            if bad:
                raise ValueError(f"devices {bad} are not in this run; it has {list(by_label)}")
            where.append(f"s.device_idx IN ({','.join('?' * len(indexes))})")
            params += indexes
        if t_begin_s is not None:
            where.append("s.t_ns >= ?")
            params.append(int(round(t_begin_s * 1e9)))
        if t_end_s is not None:
            where.append("s.t_ns < ?")
            params.append(int(round(t_end_s * 1e9)))
        query = ("SELECT s.t_ns, s.device_idx, m.name AS metric, m.unit, m.kind, s.value, s.sensor_t_ns "
                 "FROM sample s JOIN metric m ON m.id = s.metric_id")
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY s.t_ns, s.device_idx, s.metric_id, s.rowid"
        frame = self.sql(query, params)
        _nullable_ints(frame, ["sensor_t_ns"])
        frame.insert(1, "t_s", frame["t_ns"] / 1e9)
        labels = dict(zip(self.devices["idx"], self.devices["label"]))
        frame.insert(3, "device", frame["device_idx"].map(labels))
        if form == "long":
            return frame
        units = dict(zip(frame["metric"], frame["unit"]))
        # A series read twice at the same ns (a buffered metric's closing read) keeps its last value.
        unique = frame.drop_duplicates(["device_idx", "t_ns", "metric"], keep="last")
        wide = unique.pivot(index=["device_idx", "device", "t_ns"], columns="metric", values="value")
        wide.columns.name = None
        wide = wide.reset_index()
        wide.insert(3, "t_s", wide["t_ns"] / 1e9)
        wide.attrs["units"] = units
        return wide


def load_run(path):
    """Opens the run in ``path`` (a run directory or its run.db) as a :class:`Run`."""
    return Run(path)


class Campaign:
    """Every run under a directory: ``runs`` (name -> Run, name = path relative to the directory) and the
    runs' frames concatenated with a leading ``run`` column: ``info``, ``devices``, ``spans``, ``summary``,
    ``events``, ``samples(...)``."""

    def __init__(self, directory):
        directory = os.fspath(directory)
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"{directory} is not a directory of runs")
        self.path = directory
        self.runs = {}
        for root, subdirectories, files in os.walk(directory):
            subdirectories.sort()
            if RUN_DB in files:
                name = os.path.relpath(root, directory)
                self.runs[name] = Run(root)
        if not self.runs:
            raise ValueError(f"{directory} holds no run (no {RUN_DB} below it); record one with calo record")

    def __repr__(self):
        return f"calo.Campaign({self.path!r}, {len(self.runs)} runs)"

    def _concat(self, frames):
        parts = []
        for name, frame in frames:
            part = frame.copy()
            part.insert(0, "run", name)
            parts.append(part)
        return pd.concat(parts, ignore_index=True)

    @property
    def info(self):
        """One row per run: the run row (without config_json) plus duration_s."""
        rows = []
        for name, run in self.runs.items():
            row = {k: v for k, v in run.info.items() if k not in ("config_json", "config")}
            rows.append({"run": name, **row})
        return pd.DataFrame(rows)

    @property
    def devices(self):
        return self._concat((n, r.devices) for n, r in self.runs.items())

    @property
    def spans(self):
        return self._concat((n, r.spans) for n, r in self.runs.items())

    @property
    def summary(self):
        return self._concat((n, r.summary) for n, r in self.runs.items())

    @property
    def events(self):
        return self._concat((n, r.events) for n, r in self.runs.items())

    def samples(self, form="long", **selection):
        """Every run's ``samples(form, ...)`` concatenated (metrics missing from a run are NaN in wide form)."""
        return self._concat((n, r.samples(form, **selection)) for n, r in self.runs.items())


def load_campaign(directory):
    """Opens every run below ``directory`` as a :class:`Campaign`."""
    return Campaign(directory)
