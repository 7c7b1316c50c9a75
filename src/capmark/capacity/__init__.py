"""Capacity planning from an observation (the second path: a production server capmark did not load).

Pure functions over the observation record (capmark.observations.Observation); nothing here reads a database.
Bulumulle and Bordin's process (Capacity Planning as a Performance Tuning Tool, Sun BluePrints 2003): define
workloads, find the peak period, model the peak, then what-if growth (20 % compounded: +20, +44, +72.8 %) and
configuration changes, judged by utilisation against an 80 % threshold and by each workload's stretch factor.

Entry points (each returns a typed document; `doc.to_json()` gives its JSON under `schema`):

    rules = load_rules(Path("workloads.toml"))          # or parse_rules(text), or WorkloadRules(group_by="user")
    base = baseline(observation, rules, PeakOptions(by="cpu", length_s=3600), estimator="measured",
                    unattributed="background")     # or "load": CPU no process explains grows with the rates
        -> BaselineDocument: workloads (rule, shares overall and at the peak), reconciliation with pg_stat_database,
           peak (PeakWindow: window, measure series, steadiness and Little's law per workload), demands
           (DemandTable: per resource, per workload, the three estimators side by side, background and unattributed),
           model (BaselineModel: stations, rates, residual delays), at_peak (WorkloadRow per workload: rate, response
           measured/modelled, demands, utilisation share, stretch), validation on the peak and on a held-out window,
           timeline (per interval: CPU cores by workload, devices, commits/s)
    whatif(base, WhatIfRequest(growth=(parse_growth("20%x3"),), cpus=8, slas=(parse_sla("orders:p95<50ms"),)))
        -> WhatIfDocument: scenarios (utilisation per resource, response/p95/stretch per workload), first_breaking,
           runs_out_in_period
    size(base, (parse_growth("20%x3"),), slas=(...,))
        -> SizingDocument: the period capacity runs out, the target period, the least single change that fits it
    compare(base_last_month, base_now)
        -> ComparisonDocument: per workload rate, response time and demands before, after and the change
    whatif_model(model, request) and size_model(model, growth): the same on a BaselineModel alone.

Options' texts: parse_peak("2026-11-24T10:00/11:00"), check_peak_by("disk"), check_group_by("user"),
parse_growth, parse_sla: each raises CapmarkError with one sentence on bad input.
"""

from capmark.capacity.baseline import (
    STRETCH_LIMIT,
    UNATTRIBUTED,
    UTILISATION_THRESHOLD,
    BaselineDocument,
    BaselineModel,
    Solution,
    Unattributed,
    baseline,
    solve,
)
from capmark.capacity.compare import ComparisonDocument, compare
from capmark.capacity.demands import ESTIMATORS, DemandTable, Estimator
from capmark.capacity.peak import PeakOptions, PeakWindow, check_peak_by, parse_peak
from capmark.capacity.sizing import SizingDocument, size
from capmark.capacity.whatif import WhatIfDocument, WhatIfRequest, parse_growth, parse_sla, whatif
from capmark.capacity.workloads import WorkloadRules, check_group_by, load_rules, parse_rules

__all__ = [
    "ESTIMATORS", "STRETCH_LIMIT", "UNATTRIBUTED", "UTILISATION_THRESHOLD", "BaselineDocument", "BaselineModel",
    "ComparisonDocument", "DemandTable", "Estimator", "PeakOptions", "PeakWindow", "SizingDocument", "Solution",
    "Unattributed", "WhatIfDocument", "WhatIfRequest", "WorkloadRules", "baseline", "check_group_by", "check_peak_by",
    "compare", "load_rules", "parse_growth", "parse_peak", "parse_rules", "parse_sla", "size", "solve", "whatif",
]
