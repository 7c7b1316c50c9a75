"""The Universal Scalability Law (Gunther): X(N) = lambda N / (1 + sigma (N - 1) + kappa N (N - 1))."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from capmark.errors import CapmarkError


def usl(n: np.ndarray | float, lam: float, sigma: float, kappa: float) -> np.ndarray | float:
    return lam * n / (1 + sigma * (n - 1) + kappa * n * (n - 1))


def _usl_array(n: np.ndarray, lam: float, sigma: float, kappa: float) -> np.ndarray:
    """usl() over an array of concurrencies, as curve_fit calls its model."""
    return np.asarray(usl(n, lam, sigma, kappa))


@dataclass(kw_only=True)
class USLFit:
    lam: float
    sigma: float
    kappa: float
    se_lambda: float
    se_sigma: float
    se_kappa: float
    r_squared: float
    points: int

    @property
    def peak_concurrency(self) -> float:
        """N* = floor(sqrt((1 - sigma) / kappa)), as Gunther and Schwartz state it (inf when kappa = 0)."""
        if self.kappa <= 0:
            return math.inf
        return float(max(1, math.floor(math.sqrt((1 - self.sigma) / self.kappa))))

    @property
    def peak_throughput(self) -> float:
        n = self.peak_concurrency
        return self.lam / self.sigma if math.isinf(n) else float(usl(n, self.lam, self.sigma, self.kappa))

    def throughput(self, n: float) -> float:
        return float(usl(n, self.lam, self.sigma, self.kappa))

    def response_time(self, n: float, think_time: float = 0.0) -> float:
        """Little's law on the fitted curve: R = N / X - Z."""
        return n / self.throughput(n) - think_time

    @property
    def amdahl(self) -> bool:
        return self.kappa == 0


# The least-squares search's budget of model evaluations: a well-posed fit of three parameters to a dozen points
# needs a few hundred; running out means the points do not determine the curve.
MAX_EVALUATIONS = 100_000


def fit(concurrency: Sequence[float], throughput: Sequence[float], max_evaluations: int = MAX_EVALUATIONS) -> USLFit:
    """Least-squares fit with non-negative sigma and kappa; standard errors from the covariance. A search that
    stops before it settles (out of evaluations) is an error, not a curve."""
    n = np.asarray(concurrency, dtype=float)
    x = np.asarray(throughput, dtype=float)
    if len(n) < 4:
        raise CapmarkError(f"The USL has three parameters; fitting it needs at least 4 measured points, got {len(n)}.")
    lam0 = float(x[np.argmin(n)] / n[np.argmin(n)])
    try:
        from scipy.optimize import curve_fit  # loaded on first use: a command starts without scipy

        params, cov = curve_fit(_usl_array, n, x, p0=[lam0, 0.01, 0.0001], bounds=([0, 0, 0], [np.inf, 1, 1]),
                                method="trf", x_scale="jac", ftol=1e-14, xtol=1e-14, gtol=1e-14,
                                max_nfev=max_evaluations)
    except RuntimeError:  # scipy's "optimal parameters not found": the search stopped at its budget
        raise CapmarkError(f"The USL fit to {len(n)} points did not settle within {max_evaluations:,} model "
                           "evaluations; measure more job counts, spread wider, so the points determine the "
                           "curve.") from None
    lam, sigma, kappa = (float(v) for v in params)
    se = np.sqrt(np.clip(np.diag(cov), 0, None)) if np.all(np.isfinite(cov)) else np.full(3, np.nan)
    residual = x - usl(n, lam, sigma, kappa)
    spread = float(np.sum((x - x.mean()) ** 2))
    # equal throughputs (a fully serialized system) leave no variance to explain: R^2 is undefined
    r2 = 1 - float(np.sum(residual ** 2)) / spread if spread > 0 else math.nan
    return USLFit(lam=lam, sigma=sigma, kappa=kappa, se_lambda=float(se[0]), se_sigma=float(se[1]),
                  se_kappa=float(se[2]), r_squared=r2, points=len(n))
