"""The /metrics exposition of a simulated vLLM 0.32 server.

The family list, HELP texts, types, label names, histogram buckets and the family
order are taken from two real captures of vLLM 0.32.0 (copied into ``templates/``):

* ``vllm-0.32-single.prom``: one API server (prometheus_client's default registry:
  ``python_*``, ``process_*`` and a ``*_created`` sibling for every counter,
  histogram and summary child);
* ``vllm-0.32-multiprocess.prom``: ``--api-server-count 2`` (multiprocess registry:
  no ``python_*``/``process_*``/``*_created``, counters first, then histograms with
  ``_sum`` before the buckets, then gauges; the "mostrecent" gauges have no sample
  until the engine first reports).

``vllm-0.32-rl-weight-metrics.prom`` holds the two RL weight-transfer families
(``vllm/entrypoints/rl/online/metrics.py``), as vLLM 0.32's own code renders them with
prometheus_client.  vLLM registers them lazily, on the first weight operation, so they
exist only once a server has had one (``Registry.rl_enabled``) and come last.

Values are rendered from a :class:`Registry` the engine updates, with numbers
formatted exactly as prometheus_client does (``floatToGoString``) and labels sorted by
name, as prometheus_client writes them.  Pure standard library.
"""

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
SINGLE_TEMPLATE = TEMPLATE_DIR / "vllm-0.32-single.prom"
MULTIPROCESS_TEMPLATE = TEMPLATE_DIR / "vllm-0.32-multiprocess.prom"
RL_TEMPLATE = TEMPLATE_DIR / "vllm-0.32-rl-weight-metrics.prom"
RL_DURATION = "vllm:rl_weight_update_operation_duration_seconds"
RL_IN_FLIGHT = "vllm:rl_weight_update_operations_in_flight"
RL_OPERATIONS = ("init", "shutdown", "start", "start_draft", "update", "finish")   # metrics.Operation

TEXT_CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

# Families whose children appear only once a request was observed (instrumentator).
DYNAMIC_FAMILIES = (
    "http_requests_total",
    "http_request_size_bytes",
    "http_response_size_bytes",
    "http_request_duration_seconds",
)

V0_KV_NAME = "vllm:gpu_cache_usage_perc"
V0_KV_HELP = "GPU KV-cache usage. 1 means 100 percent usage."
V0_SKIP = ("vllm:engine_sleep_state", "vllm:num_requests_waiting_by_reason")


def go_float(value):
    """Format a float as prometheus_client's ``floatToGoString`` does."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def escape_label_value(value):
    return str(value).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _unescape_label_value(value):
    out = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _parse_sample(line):
    """Parse one sample line of the (well-formed) template: name, labels, value."""
    brace = line.find("{")
    space = line.rfind(" ")
    if brace == -1 or brace > space:
        return line[:space], {}, line[space + 1:]
    name = line[:brace]
    close = line.rfind("}")
    body = line[brace + 1:close]
    labels = {}
    i = 0
    while i < len(body):
        eq = body.index("=", i)
        key = body[i:eq].strip().lstrip(",").strip()
        j = eq + 2  # skip ="
        val = []
        while body[j] != '"':
            if body[j] == "\\":
                val.append(body[j:j + 2])
                j += 2
            else:
                val.append(body[j])
                j += 1
        labels[key] = _unescape_label_value("".join(val))
        i = j + 1
        if i < len(body) and body[i] == ",":
            i += 1
    return name, labels, line[close + 2:]


@dataclass
class Family:
    """One metric family as it appears in the capture."""

    name: str                 # name on the HELP/TYPE lines
    base: str                 # prometheus_client metric.name (counters: without _total)
    type: str                 # counter | gauge | histogram | summary
    help: str                 # HELP text, verbatim (already escaped)
    group: str                # python | process | vllm | http
    per_engine: bool = False  # carries engine="i"
    has_model: bool = False   # carries model_name
    children: list = field(default_factory=list)   # extra label tuples, template order
    buckets: list = field(default_factory=list)    # le strings (histograms), "+Inf" last
    static: dict = field(default_factory=dict)     # child -> template value
    has_created: bool = False
    dynamic: bool = False
    mp_mostrecent: bool = False  # multiprocess: no sample until the engine reported

    @property
    def bounds(self):
        return [float(b) for b in self.buckets if b != "+Inf"]


def _group(name):
    if name.startswith("python_"):
        return "python"
    if name.startswith("process_"):
        return "process"
    if name.startswith("vllm:"):
        return "vllm"
    return "http"


def _child_key(labels):
    return tuple(sorted((k, v) for k, v in labels.items() if k not in ("engine", "model_name", "le")))


def parse_template(text):
    """Parse a capture into an ordered list of :class:`Family` (``_created`` folded in)."""
    families = []
    by_name = {}
    current = None
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP "):
            rest = line[len("# HELP "):]
            name, dummy, doc = rest.partition(" ")
            prev = families[-1] if families else None
            if prev is not None and name == prev.base + "_created" and prev.type in ("counter", "histogram", "summary"):
                prev.has_created = True
                current = None
                continue
            base = name
            current = Family(name=name, base=base, type="untyped", help=doc, group=_group(name))
            families.append(current)
            by_name[name] = current
            continue
        if line.startswith("# TYPE "):
            if current is None:
                continue
            name, dummy, typ = line[len("# TYPE "):].partition(" ")
            current.type = typ
            if typ == "counter" and name.endswith("_total"):
                current.base = name[:-len("_total")]
            continue
        if line.startswith("#"):
            continue
        if current is None:
            continue  # a _created sample
        sname, labels, value = _parse_sample(line)
        if "engine" in labels:
            current.per_engine = True
        if "model_name" in labels:
            current.has_model = True
        key = _child_key(labels)
        if current.type == "histogram" and sname.endswith("_bucket"):
            if not current.children or key == current.children[0]:
                if labels["le"] not in current.buckets:
                    current.buckets.append(labels["le"])
        if key not in current.children:
            current.children.append(key)
        if current.type in ("gauge",) or current.group in ("python", "process"):
            current.static.setdefault((sname, key), float(value))
    for fam in families:
        if fam.name in DYNAMIC_FAMILIES:
            fam.dynamic = True
            fam.children = []
    return families


class Spec:
    """Family lists for both registry kinds, parsed once per process."""

    _instance = None

    def __init__(self):
        self.single = parse_template(SINGLE_TEMPLATE.read_text(encoding="utf-8"))
        self.by_name = {f.name: f for f in self.single}
        if "http_request_duration_highr_seconds" in self.by_name:
            # the highr histogram has no labels: one child, present from the start
            self.by_name["http_request_duration_highr_seconds"].children = [()]
        mp_families = parse_template(MULTIPROCESS_TEMPLATE.read_text(encoding="utf-8"))
        mp_order = []
        for fam in mp_families:
            if fam.name not in self.by_name:
                continue
            if fam.type == "gauge" and fam.group == "vllm" and not fam.children:
                self.by_name[fam.name].mp_mostrecent = True
            mp_order.append(fam.name)
        # Families the multiprocess capture could not show (no sample yet) go where the
        # multiprocess collector puts them: counters after counters, histograms after
        # histograms, summaries before the gauges.

        def insert_after(order, anchor_pred, name):
            idx = max((i for i, n in enumerate(order) if anchor_pred(self.by_name[n])), default=len(order) - 1)
            order.insert(idx + 1, name)
        if "http_requests_total" not in mp_order:
            insert_after(mp_order, lambda f: f.type == "counter", "http_requests_total")
        if "http_request_duration_seconds" not in mp_order:
            insert_after(mp_order, lambda f: f.type == "histogram", "http_request_duration_seconds")
        for name in ("http_request_size_bytes", "http_response_size_bytes"):
            if name not in mp_order:
                insert_after(mp_order, lambda f: f.type in ("histogram", "summary"), name)
        self.multiprocess = [self.by_name[n] for n in mp_order]
        # The RL weight-transfer families: children (operation=...) appear as operations run.
        self.rl = parse_template(RL_TEMPLATE.read_text(encoding="utf-8"))
        for fam in self.rl:
            fam.group = "rl"
            fam.dynamic = True
            fam.children = []
            self.by_name[fam.name] = fam
        rl_hist = [f for f in self.rl if f.type == "histogram"]
        rl_other = [f for f in self.rl if f.type != "histogram"]
        self.single_rl = self.single + self.rl
        # Multiprocess: the histogram's samples live in the histogram_<pid>.db file, after the
        # histograms written before it; the livesum gauge has its own gauge_livesum_<pid>.db
        # file, whose place in the directory listing is not knowable: put it last.
        last_hist = max(i for i, f in enumerate(self.multiprocess) if f.type in ("histogram", "summary"))
        self.multiprocess_rl = self.multiprocess[:last_hist + 1] + rl_hist + self.multiprocess[last_hist + 1:] + rl_other

    @classmethod
    def get(cls):
        if cls._instance is None:
            cls._instance = Spec()
        return cls._instance


class Hist:
    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds):
        self.bounds = bounds
        self.counts = [0.0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0.0

    def observe(self, value, times=1):
        i = 0
        n = len(self.bounds)
        while i < n and value > self.bounds[i]:
            i += 1
        self.counts[i] += times
        self.sum += value * times
        self.count += times

    def cumulative(self):
        acc = 0.0
        out = []
        for c in self.counts:
            acc += c
            out.append(acc)
        return out


class Summ:
    __slots__ = ("sum", "count")

    def __init__(self):
        self.sum = 0.0
        self.count = 0.0

    def observe(self, value):
        self.sum += value
        self.count += 1


def _norm_child(child):
    if not child:
        return ()
    if isinstance(child, dict):
        return tuple(sorted((k, str(v)) for k, v in child.items()))
    return tuple(sorted(child))


class Registry:
    """The values of one simulated API-server process (counters reset on restart)."""

    def __init__(self, engines=1, created_at=None):
        self.spec = Spec.get()
        self.engines = engines
        self.values = {}
        self.created = {}
        self.dynamic_children = {name: [] for name in DYNAMIC_FAMILIES + (RL_DURATION, RL_IN_FLIGHT)}
        self.reported = set()   # engines that published stats at least once
        self.rl_enabled = False  # the RL weight-transfer families are registered (first operation)
        t = time.time() if created_at is None else created_at
        for fam in self.spec.single:
            if fam.dynamic:
                continue
            engs = range(engines) if fam.per_engine else (None,)
            for child in fam.children:
                for eng in engs:
                    key = (fam.name, eng, child)
                    self.values[key] = self._initial(fam, child)
                    if fam.has_created:
                        t += 0.0000061
                        self.created[key] = t

    def _initial(self, fam, child):
        if fam.type == "histogram":
            return Hist(fam.bounds)
        if fam.type == "summary":
            return Summ()
        if fam.group in ("python", "process"):
            return fam.static.get((fam.name, child), 0.0)
        if fam.type == "gauge":
            if fam.name == "vllm:cache_config_info":
                return 1.0
            if fam.name == "vllm:engine_sleep_state":
                return 1.0 if dict(child).get("sleep_state") == "awake" else 0.0
        return 0.0

    # -- updates ---------------------------------------------------------------------------
    def inc(self, name, eng, amount=1.0, child=()):
        self.values[(name, eng, _norm_child(child))] += amount

    def set(self, name, eng, value, child=()):
        self.values[(name, eng, _norm_child(child))] = float(value)

    def get(self, name, eng=None, child=()):
        return self.values.get((name, eng, _norm_child(child)))

    def observe(self, name, eng, value, child=(), times=1):
        self.values[(name, eng, _norm_child(child))].observe(value, times)

    def total(self, name, child=None):
        """Sum of a counter over engines (and over children unless one is given)."""
        total = 0.0
        want = None if child is None else _norm_child(child)
        for (n, _eng, ch), v in self.values.items():
            if n == name and (want is None or ch == want):
                total += v if isinstance(v, float) else v.count
        return total

    def record_http(self, handler, method, status, req_size, resp_size, duration, now=None):
        """What prometheus-fastapi-instrumentator records when a response completed."""
        now = time.time() if now is None else now
        group = f"{int(status) // 100}xx"
        for name, child, kind in (
            ("http_requests_total", (("handler", handler), ("method", method), ("status", group)), "counter"),
            ("http_request_size_bytes", (("handler", handler),), "summary"),
            ("http_response_size_bytes", (("handler", handler),), "summary"),
            ("http_request_duration_seconds", (("handler", handler), ("method", method)), "histogram"),
        ):
            key = (name, None, child)
            if key not in self.values:
                if kind == "summary":
                    self.values[key] = Summ()
                elif kind == "histogram":
                    self.values[key] = Hist(self.spec.by_name[name].bounds)
                else:
                    self.values[key] = 0.0
                self.created[key] = now
                self.dynamic_children[name].append(child)
        self.values[("http_requests_total", None, (("handler", handler), ("method", method), ("status", group)))] += 1
        self.values[("http_request_size_bytes", None, (("handler", handler),))].observe(float(req_size))
        self.values[("http_response_size_bytes", None, (("handler", handler),))].observe(float(resp_size))
        self.values[("http_request_duration_seconds", None, (("handler", handler), ("method", method)))].observe(duration)
        self.values[("http_request_duration_highr_seconds", None, ())].observe(duration)

    # -- RL weight-transfer operations (entrypoints/rl/online/metrics.py) --------------------

    def rl_set_in_flight(self, operation, value):
        """``in_flight.labels(operation).inc()/.dec()``: the gauge child exists from the first op on."""
        self.rl_enabled = True
        key = (RL_IN_FLIGHT, None, (("operation", operation),))
        if key not in self.values:
            self.dynamic_children[RL_IN_FLIGHT].append(key[2])
        self.values[key] = float(value)

    def rl_observe(self, operation, duration, now=None):
        """``duration.labels(operation).observe()`` when an operation ends (its child is created then)."""
        self.rl_enabled = True
        key = (RL_DURATION, None, (("operation", operation),))
        if key not in self.values:
            self.values[key] = Hist(self.spec.by_name[RL_DURATION].bounds)
            self.created[key] = time.time() if now is None else now
            self.dynamic_children[RL_DURATION].append(key[2])
        self.values[key].observe(duration)


def _labelstr(pairs):
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in sorted(pairs)) + "}"


class Renderer:
    """Render a :class:`Registry` in the text format (or OpenMetrics), single or multiprocess."""

    def __init__(self, model="tiny", engine_label=True, flavor="v1"):
        self.model = model
        self.engine_label = engine_label
        self.flavor = flavor
        self._label_cache = {}

    def _labels(self, fam, eng, child, extra=()):
        ck = (fam.name, eng, child, extra)
        s = self._label_cache.get(ck)
        if s is None:
            pairs = list(child) + list(extra)
            if fam.per_engine and self.engine_label and eng is not None:
                pairs.append(("engine", str(eng)))
            if fam.has_model:
                pairs.append(("model_name", self.model))
            s = _labelstr(pairs)
            self._label_cache[ck] = s
        return s

    def _children(self, reg, fam):
        if fam.dynamic:
            return [(None, c) for c in reg.dynamic_children.get(fam.name, [])]
        if fam.per_engine:
            return [(eng, c) for c in fam.children for eng in range(reg.engines)]
        return [(None, c) for c in fam.children]

    def _names(self, fam):
        name, base, doc = fam.name, fam.base, fam.help
        if self.flavor == "v0" and fam.name == "vllm:kv_cache_usage_perc":
            name = base = V0_KV_NAME
            doc = V0_KV_HELP
        return name, base, doc

    def render(self, reg, multiprocess=False, log_stats=True, openmetrics=False):
        spec = reg.spec
        if reg.rl_enabled:
            families = spec.multiprocess_rl if multiprocess else spec.single_rl
        else:
            families = spec.multiprocess if multiprocess else spec.single
        out = []
        emit = out.append
        for fam in families:
            if fam.group == "vllm":
                if not log_stats:
                    continue
                if self.flavor == "v0" and fam.name in V0_SKIP:
                    continue
            if multiprocess and fam.group in ("python", "process"):
                continue
            children = self._children(reg, fam)
            if multiprocess and fam.dynamic and not children:
                continue
            name, base, doc = self._names(fam)
            if openmetrics:
                emit(f"# HELP {base} {doc.replace(chr(34), chr(92) + chr(34))}\n")
                emit(f"# TYPE {base} {fam.type}\n")
            else:
                emit(f"# HELP {name} {doc}\n")
                emit(f"# TYPE {name} {fam.type}\n")
            if multiprocess and fam.mp_mostrecent:
                children = [(e, c) for e, c in children if e in reg.reported]
            created_lines = []
            with_created = fam.has_created and not multiprocess
            for eng, child in children:
                key = (fam.name, eng, child)
                val = reg.values[key]
                lab = self._labels(fam, eng, child)
                if fam.type == "histogram":
                    cum = val.cumulative()
                    bucket_lines = [
                        f"{base}_bucket{self._labels(fam, eng, child, (('le', le),))} {go_float(cum[i])}\n"
                        for i, le in enumerate(fam.buckets)
                    ]
                    if multiprocess:
                        emit(f"{base}_sum{lab} {go_float(val.sum)}\n")
                        out.extend(bucket_lines)
                        emit(f"{base}_count{lab} {go_float(val.count)}\n")
                    else:
                        out.extend(bucket_lines)
                        emit(f"{base}_count{lab} {go_float(val.count)}\n")
                        emit(f"{base}_sum{lab} {go_float(val.sum)}\n")
                elif fam.type == "summary":
                    emit(f"{base}_count{lab} {go_float(val.count)}\n")
                    emit(f"{base}_sum{lab} {go_float(val.sum)}\n")
                elif fam.type == "counter":
                    emit(f"{base}_total{lab} {go_float(val)}\n")
                else:
                    emit(f"{name}{lab} {go_float(val)}\n")
                if with_created:
                    line = f"{base}_created{lab} {go_float(reg.created.get(key, 0.0))}\n"
                    if openmetrics:
                        emit(line)
                    else:
                        created_lines.append(line)
            if created_lines:
                emit(f"# HELP {base}_created {doc}\n")
                emit(f"# TYPE {base}_created gauge\n")
                out.extend(created_lines)
        if openmetrics:
            emit("# EOF\n")
        return "".join(out)
