"""Speed of the model library on the sizes the model issue names (best of 5 runs each).

    python benchmarks/model_speed.py
"""

from __future__ import annotations

import random
import time

from capmark.model import lqn, mva
from capmark.model.examples import stress_lqm


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    rng = random.Random(1)
    big = [mva.Station(f"s{i}", demand=rng.uniform(0.01, 1.0)) for i in range(100)]
    t = best(lambda: mva.exact_mva(big, 10_000, 5.0))
    print(f"exact single-class MVA, N=10,000, 100 stations: {t * 1000:.1f} ms (target <= 20 ms)")

    d3 = [[rng.uniform(0.01, 1.0) for _ in range(3)] for _ in range(10)]
    t = best(lambda: mva.exact_mva_multiclass(d3, [30, 30, 30], [1.0, 1.0, 1.0]), repeat=3)
    print(f"exact multi-class MVA, 3 classes x 30, 10 stations: {t * 1000:.0f} ms (target <= 1,000 ms)")

    d10 = [[rng.uniform(0.01, 1.0) for _ in range(10)] for _ in range(20)]
    t = best(lambda: mva.schweitzer_multiclass(d10, [1000] * 10, [1.0] * 10))
    print(f"Bard-Schweitzer, 10 classes x 1,000, 20 stations: {t * 1000:.1f} ms (target <= 100 ms)")

    for method in ("schweitzer", "exact"):
        times = [best(lambda n=n, m=method: lqn.solve(*stress_lqm(n), device_solver=m)) for n in range(1, 11)]
        print(f"CITI report's Stress LQM, device layer {method}: " + ", ".join(f"{t * 1000:.1f}" for t in times)
              + " ms for 1..10 clients (target <= 50 ms each)")


if __name__ == "__main__":
    main()
