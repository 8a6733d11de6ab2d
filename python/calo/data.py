"""Run stores (run.db, docs/RUN_STORE.md) as pandas DataFrames.

Times: ``t_ns`` is nanoseconds since the run started (host CLOCK_MONOTONIC), ``t_s`` the same in seconds. The
frames of timed rows (samples, spans, steps, events) are indexed by ``time``, the wall clock (datetime64[ns, UTC])
``run.start_time + t_ns``, so ``resample`` and time slicing work. Metric names carry their unit
(``power_instant_w``); the unit is also a column (long form) or ``run.units``. Summary rows carry the device they
are about (``device_idx``, ``device``) so they join with ``devices`` and ``samples``; MFU is a fraction (0.48),
as the store keeps it (docs/METRICS.md); the CLI prints it as a percentage (48 %).
"""

import json
import os
import re
import sqlite3
import urllib.parse

import pandas as pd

RUN_DB = "run.db"
CAMPAIGN_INDEX = "campaign.json"
# A wall_offset_ns before 2000-01-01 is no Unix time: an ingested trace whose clock is not the wall clock (a
# profiler's monotonic clock) stores its own origin there. Such a run's times count from 1970-01-01T00:00Z.
EARLIEST_WALL_NS = 946_684_800 * 10**9
# Record and bench runs of schema 1 stored the wall clock at the host's CLOCK_MONOTONIC zero (docs/RUN_STORE.md).
SCHEMA1_HOST_CLOCK_KINDS = ("record", "bench")


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
    """``gpu3`` / ``cpu``, prefixed ``node1/`` in runs of several nodes (merged, or simulated on several)."""
    label = f"gpu{slot}" if kind == "gpu" else "cpu"
    return f"node{node}/{label}" if multi_node else label


_NODE_PREFIX = re.compile(r"node(\d+)/(.*)", re.S)
_GPU_SCOPE = re.compile(r"gpu(\d+)")
_PHASE_SCOPE = re.compile(r"phase:(.*)/dev(\d+)", re.S)
_RANK_SCOPE = re.compile(r"rank(\d+)")


def _scope_labels(kind, devices):
    """What a writer of ``kind`` calls each of ``devices`` (its own device rows, (idx, kind, slot) in idx order)
    in summary scopes: ``gpu<rank>`` in sim runs (a device's idx is its rank); ``gpu<slot>`` in record runs (the
    GPU's index on its host), ``gpu<idx>`` for a second GPU of the same slot (src/telemetry/recorder.cpp,
    DeviceMap::gpu_label). Returns scope name -> idx."""
    labels = {}
    for idx, device_kind, slot in devices:
        if device_kind != "gpu":
            continue
        label = f"gpu{idx}" if kind == "sim" else f"gpu{slot}"
        labels[f"gpu{idx}" if label in labels else label] = idx
    return labels


def _number_or_text(values):
    """An axis' values (the index keeps them as text) as numbers when every one is a number."""
    numbers = pd.to_numeric(pd.Series(values, dtype="object"), errors="coerce")
    if numbers.isna().any():
        return list(values)
    return [int(n) if float(n).is_integer() else float(n) for n in numbers]


class Run:
    """One run: ``info`` (dict of the run row, ``config`` parsed), ``devices``, ``metrics``, ``spans``,
    ``summary``, ``events`` (DataFrames) and ``samples(form=...)``. Frames are read on first use.

    ``start_time`` is the wall clock at ``t_ns = 0`` (UTC); the timed frames are indexed by ``time`` =
    ``start_time + t_ns``. ``info["wall_clock"]`` is False for a run that stores no wall-clock time (an ingested
    trace on a profiler's own clock): its ``start_time`` is 1970-01-01T00:00Z, so ``time`` is the elapsed time."""

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
            schema_version = self._connection.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as error:
            self._connection.close()
            raise ValueError(f"{self.db_path}: not a readable calo run database ({error}); "
                             "pass a directory written by calo") from error
        if row is None:
            raise ValueError(f"{self.db_path} holds no run row; it was not written by calo")
        keys = ["kind", "name", "command", "config_json", "host", "started_ns", "ended_ns", "wall_offset_ns",
                "version"]
        self.info = dict(zip(keys, row))
        self.info["schema_version"] = schema_version
        # As store::migrate_run_info: schema-1 record and bench runs held the wall clock at CLOCK_MONOTONIC zero.
        if (schema_version == 1 and self.info["kind"] in SCHEMA1_HOST_CLOCK_KINDS
                and self.info["wall_offset_ns"]):
            self.info["wall_offset_ns"] += self.info["started_ns"]
        # A sim run's times are simulated time: the wall clock when the simulator ran says nothing of them, so
        # its ``time`` counts from 1970-01-01T00:00Z like a run without a wall clock.
        self.info["wall_clock"] = bool(self.info["kind"] != "sim" and self.info["wall_offset_ns"]
                                       and self.info["wall_offset_ns"] >= EARLIEST_WALL_NS)
        self._origin_ns = self.info["wall_offset_ns"] if self.info["wall_clock"] else 0
        self.info["start_time"] = pd.Timestamp(self._origin_ns, unit="ns", tz="UTC")
        self.info["config"] = json.loads(self.info["config_json"] or "{}")
        self.info["duration_s"] = ((self.info["ended_ns"] - self.info["started_ns"]) / 1e9
                                   if self.info["ended_ns"] else float("nan"))

    def __repr__(self):
        return f"calo.Run({self.path!r}, kind={self.info['kind']!r}, name={self.info['name']!r})"

    @property
    def start_time(self):
        """Wall-clock time (pandas Timestamp, UTC) at ``t_ns = 0``; 1970-01-01T00:00Z without a wall clock."""
        return self.info["start_time"]

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

    def times(self, t_ns):
        """Run times (ns since the start, a sequence) as wall-clock times: a DatetimeIndex (UTC)."""
        values = pd.Series(t_ns, dtype="int64").to_numpy() + self._origin_ns
        return pd.DatetimeIndex(pd.to_datetime(values, unit="ns", utc=True))

    def _indexed_by_time(self, frame, t_ns_column):
        frame.index = self.times(frame[t_ns_column])
        frame.index.name = "time"
        return frame

    def _device_labels(self):
        return dict(zip(self.devices["idx"], self.devices["label"]))

    @property
    def devices(self):
        """Table ``device`` plus ``label`` (gpu0, cpu, node1/gpu0) and the keys the other frames name a device
        by: ``device_idx`` (= idx, nullable Int64 as theirs) and ``device`` (= label), so
        ``run.summary.merge(run.devices, on="device")`` joins."""
        def build():
            frame = self.sql("SELECT idx, node, slot, kind, name, uuid, pci_bus, power_limit_w, max_sm_mhz, "
                             "driver FROM device ORDER BY idx")
            multi_node = bool((frame["node"] > 0).any()) if len(frame) else False
            frame["label"] = [device_label(k, s, n, multi_node)
                              for k, s, n in zip(frame["kind"], frame["slot"], frame["node"])]
            frame["device_idx"] = frame["idx"].astype("Int64")
            frame["device"] = frame["label"]
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
        """Table ``span`` (NULL = <NA>; its ``rank`` column is ``rank_idx`` here, as ``rank`` is a DataFrame
        method) plus device (label; <NA> for a span of no one device), t_begin_s,
        t_end_s, duration_s and time_end (wall clock of the end); indexed by ``time`` (wall clock of the begin),
        ordered by begin time."""
        def build():
            frame = self.sql("SELECT rank AS rank_idx, device_idx, kind, name, category, t_begin_ns, t_end_ns, "
                             "step, microbatch, stage FROM span ORDER BY t_begin_ns, rank, device_idx, rowid")
            _nullable_ints(frame, ["rank_idx", "device_idx", "step", "microbatch", "stage"])
            frame.insert(2, "device", frame["device_idx"].map(self._device_labels()))
            frame["t_begin_s"] = frame["t_begin_ns"] / 1e9
            frame["t_end_s"] = frame["t_end_ns"] / 1e9
            frame["duration_s"] = (frame["t_end_ns"] - frame["t_begin_ns"]) / 1e9
            frame["time_end"] = self.times(frame["t_end_ns"])
            return self._indexed_by_time(frame, "t_begin_ns")
        return self._cached("spans", build)

    @property
    def steps(self):
        """Step spans only (indexed by ``time``, as ``spans``)."""
        spans = self.spans
        return spans[spans["kind"] == "step"]

    @property
    def summary(self):
        """Table ``summary`` (scope, key, value, unit; insertion order) plus what each scope is about:
        ``device_idx`` and ``device`` (the label of ``devices``/``samples``: a sim's ``gpu8`` on 8-GPU nodes is
        ``node1/gpu0``), ``node``, ``rank_idx`` and ``phase``; <NA> where the scope says nothing of it (``run``)."""
        return self._cached("summary", self._build_summary)

    def _build_summary(self):
        frame = self.sql("SELECT scope, key, value, unit FROM summary ORDER BY rowid")
        devices = self.devices
        rows = list(zip(devices["idx"], devices["kind"], devices["slot"], devices["node"]))
        node_of = {idx: node for idx, _, _, node in rows}
        groups = {}  # node prefix (None: none) -> (the writer's scope label -> idx, writer's own idx -> idx)

        def group(prefix):
            if prefix not in groups:
                if prefix is None:  # the run's own writer: its idx are the store's
                    own = [(idx, kind, slot) for idx, kind, slot, _ in rows]
                    by_own = {idx: idx for idx, _, _ in own}
                else:  # calo merge: node k's devices, renumbered in their order from the input's 0, 1, ...
                    members = [(idx, kind, slot) for idx, kind, slot, node in rows if node == prefix]
                    own = [(position, kind, slot) for position, (_, kind, slot) in enumerate(members)]
                    by_own = {position: idx for position, (idx, _, _) in enumerate(members)}
                labels = {label: by_own[own_idx]
                          for label, own_idx in _scope_labels(self.info["kind"], own).items()}
                groups[prefix] = (labels, by_own)
            return groups[prefix]

        resolved = []
        for scope in frame["scope"]:
            node = device = rank = phase = None
            rest = scope
            prefixed = _NODE_PREFIX.fullmatch(scope)
            if prefixed:
                node, rest = int(prefixed.group(1)), prefixed.group(2)
            labels, by_own = group(node)
            phase_scope, rank_scope = _PHASE_SCOPE.fullmatch(rest), _RANK_SCOPE.fullmatch(rest)
            if _GPU_SCOPE.fullmatch(rest):
                device = labels.get(rest)
            elif phase_scope:
                phase, device = phase_scope.group(1), by_own.get(int(phase_scope.group(2)))
            elif rank_scope:
                rank = int(rank_scope.group(1))
            if device is not None:
                node = node_of[device]
            resolved.append((device, node, rank, phase))
        frame["device_idx"] = pd.array([r[0] for r in resolved], dtype="Int64")
        frame["device"] = frame["device_idx"].map(self._device_labels())
        frame["node"] = pd.array([r[1] for r in resolved], dtype="Int64")
        frame["rank_idx"] = pd.array([r[2] for r in resolved], dtype="Int64")
        frame["phase"] = pd.Series([r[3] for r in resolved], dtype="object")
        return frame

    @property
    def events(self):
        """Table ``event`` plus device (label) and t_s, in time order, indexed by ``time``."""
        def build():
            frame = self.sql("SELECT t_ns, level, device_idx, source, message FROM event ORDER BY t_ns, rowid")
            _nullable_ints(frame, ["device_idx"])
            frame.insert(3, "device", frame["device_idx"].map(self._device_labels()))
            frame["t_s"] = frame["t_ns"] / 1e9
            return self._indexed_by_time(frame, "t_ns")
        return self._cached("events", build)

    def samples(self, form="long", metrics=None, devices=None, t_begin_s=None, t_end_s=None):
        """Samples, optionally only of some metrics (names) and devices (idx or label) in [t_begin_s, t_end_s),
        indexed by ``time`` (wall clock of t_ns), in time order.

        ``form="long"``: one row per sample: t_ns, t_s, device_idx, device, metric, unit, kind, value,
        sensor_t_ns (<NA> where the source gives no sensor time).
        ``form="wide"``: one row per (device, read time), one column per metric (NaN where that metric was not
        read at that time; metrics have their own periods); units in ``frame.attrs["units"]`` and ``run.units``.
        Per device in fixed intervals: ``wide.groupby("device").resample("1s").mean(numeric_only=True)``.
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
        frame.insert(3, "device", frame["device_idx"].map(self._device_labels()))
        if form == "long":
            return self._indexed_by_time(frame, "t_ns")
        units = dict(zip(frame["metric"], frame["unit"]))
        # A series read twice at the same ns (a buffered metric's closing read) keeps its last value.
        unique = frame.drop_duplicates(["device_idx", "t_ns", "metric"], keep="last")
        wide = unique.pivot(index=["device_idx", "device", "t_ns"], columns="metric", values="value")
        wide.columns.name = None
        wide = wide.reset_index().sort_values(["t_ns", "device_idx"], kind="stable")
        wide.insert(3, "t_s", wide["t_ns"] / 1e9)
        wide.attrs["units"] = units
        return self._indexed_by_time(wide, "t_ns")


def load_run(path):
    """Opens the run in ``path`` (a run directory or its run.db) as a :class:`Run`."""
    return Run(path)


class Campaign:
    """Every run under a directory: ``runs`` (name -> Run, name = path relative to the directory) and the
    runs' frames concatenated with a leading ``run`` column, then one column per campaign axis (``layout``,
    ``mbs``, ...: the run's point's value in the ``calo sweep`` index DIR/campaign.json, numbers as numbers; <NA>
    for a run that is no point of a campaign): ``info``, ``devices``, ``spans``, ``steps``, ``summary``,
    ``events``, ``samples(...)``. ``axes`` names the axes; ``points``: every point of the indexes, also those
    skipped or failed (which have no run). Timed frames keep their ``time`` index."""

    def __init__(self, directory):
        directory = os.fspath(directory)
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"{directory} is not a directory of runs")
        self.path = directory
        self.runs = {}
        indexes = []
        for root, subdirectories, files in os.walk(directory):
            subdirectories.sort()
            if RUN_DB in files:
                name = os.path.relpath(root, directory)
                self.runs[name] = Run(root)
            if CAMPAIGN_INDEX in files:
                indexes.append(root)
        if not self.runs:
            raise ValueError(f"{directory} holds no run (no {RUN_DB} below it); record one with calo record")
        self.points = self._read_points(indexes)
        self._axis_values = {}  # run name -> {axis: value}
        for point in self.points.to_dict("records"):
            if isinstance(point["run"], str):
                self._axis_values[point["run"]] = {axis: point.get(axis) for axis in self.axes}

    def _read_points(self, indexes):
        """Every point of the campaign indexes found, one row each; sets ``axes``."""
        loaded = []
        for root in indexes:
            path = os.path.join(root, CAMPAIGN_INDEX)
            try:
                with open(path, encoding="utf-8") as file:
                    index = json.load(file)
                loaded.append((root, index.get("campaign"), list(index.get("axes", [])), list(index["points"])))
            except (OSError, ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}: not a readable campaign index ({error}); calo sweep --resume --adopt "
                                 "rebuilds it") from error
        self.axes = list(dict.fromkeys(axis for _, _, axes, _ in loaded for axis in axes))
        # The index keeps every axis value as text ("2"): an axis whose values are all numbers gets numbers.
        texts = {axis: [] for axis in self.axes}
        for _, _, _, points in loaded:
            for point in points:
                for axis, value in point.get("axis_values", []):
                    texts.setdefault(axis, []).append(value)
        typed = {axis: dict(zip(values, _number_or_text(values))) for axis, values in texts.items()}
        self._integer_axes = {axis for axis, values in typed.items()
                              if values and all(isinstance(v, int) for v in values.values())}
        figure_columns = {"mfu": "mfu_fraction"}  # docs/METRICS.md: a ratio; the CLI prints it x 100 as %
        rows = []
        for root, campaign, _, points in loaded:
            for point in points:
                run = os.path.relpath(os.path.normpath(os.path.join(root, point.get("run_dir", ""))), self.path)
                row = {"campaign": campaign, "point": point.get("name"), "status": point.get("status"),
                       "run": run if point.get("run_dir") and run in self.runs else None}
                row.update({axis: typed[axis][value] for axis, value in point.get("axis_values", [])})
                for figure, value in (point.get("figures") or {}).items():
                    row[figure_columns.get(figure, figure)] = value
                row["wall_s"] = point.get("wall_s")
                row["reason"] = point.get("reason")
                rows.append(row)
        return pd.DataFrame(rows, columns=None if rows else ["campaign", "point", "status", "run", *self.axes])

    def __repr__(self):
        return f"calo.Campaign({self.path!r}, {len(self.runs)} runs)"

    def _concat(self, frames, keep_index=False):
        parts = []
        for name, frame in frames:
            part = frame.copy()
            part.insert(0, "run", name)
            values = self._axis_values.get(name, {})
            for position, axis in enumerate(self.axes, start=1):
                part.insert(position, axis, values.get(axis))
            parts.append(part)
        joined = pd.concat(parts, ignore_index=not keep_index)
        for axis in self.axes:  # runs that are no point have none: integers stay integers (<NA>)
            column = joined[axis]
            joined[axis] = column.astype("Int64") if axis in self._integer_axes else column.infer_objects()
        return joined

    @property
    def info(self):
        """One row per run: the run row (without config_json) plus duration_s."""
        rows = [pd.DataFrame([{k: v for k, v in run.info.items() if k not in ("config_json", "config")}])
                for run in self.runs.values()]
        return self._concat(zip(self.runs, rows))

    @property
    def devices(self):
        return self._concat((n, r.devices) for n, r in self.runs.items())

    @property
    def spans(self):
        return self._concat(((n, r.spans) for n, r in self.runs.items()), keep_index=True)

    @property
    def steps(self):
        return self._concat(((n, r.steps) for n, r in self.runs.items()), keep_index=True)

    @property
    def summary(self):
        return self._concat((n, r.summary) for n, r in self.runs.items())

    @property
    def events(self):
        return self._concat(((n, r.events) for n, r in self.runs.items()), keep_index=True)

    def samples(self, form="long", **selection):
        """Every run's ``samples(form, ...)`` concatenated (metrics missing from a run are NaN in wide form)."""
        return self._concat(((n, r.samples(form, **selection)) for n, r in self.runs.items()), keep_index=True)


def load_campaign(directory):
    """Opens every run below ``directory`` as a :class:`Campaign`."""
    return Campaign(directory)
