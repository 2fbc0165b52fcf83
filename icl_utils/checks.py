"""Argument checks shared by the package: each raises a ValueError or TypeError that names the argument."""

from __future__ import annotations

import numbers

import torch
from torch import Tensor


def positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def nonnegative_float(name: str, value: object, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not value == value or value < 0 or (strict and value == 0) or value == float("inf"):
        raise ValueError(f"{name} must be {'> 0' if strict else '>= 0'} and finite, got {value}")
    return value


def vector(name: str, value: object, dim: int) -> Tensor:
    t = torch.as_tensor(value, dtype=torch.float64) if not isinstance(value, Tensor) else value.double()
    if tuple(t.shape) != (dim,):
        raise ValueError(f"{name} must have shape ({dim},), got {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite")
    return t.cpu()


def matrix(name: str, value: object, dim: int) -> Tensor:
    """A finite ``(dim, dim)`` matrix, as float64 on the CPU."""
    t = torch.as_tensor(value, dtype=torch.float64) if not isinstance(value, Tensor) else value.double()
    if tuple(t.shape) != (dim, dim):
        raise ValueError(f"{name} must have shape ({dim}, {dim}), got {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite")
    return t.cpu()


def psd_matrix(name: str, value: object, dim: int) -> Tensor:
    """A symmetric positive semi-definite ``(dim, dim)`` matrix, as float64 on the CPU."""
    t = matrix(name, value, dim)
    scale = max(t.abs().max().item(), 1.0)
    if not torch.allclose(t, t.T, atol=1e-8 * scale):
        raise ValueError(f"{name} must be symmetric")
    if torch.linalg.eigvalsh(t).min().item() < -1e-8 * scale:
        raise ValueError(f"{name} must be positive semi-definite")
    return t


def psd_sqrt(cov: Tensor) -> Tensor:
    """The symmetric square root of a PSD matrix (works for singular matrices too)."""
    evals, evecs = torch.linalg.eigh(cov)
    return evecs @ torch.diag(evals.clamp(min=0).sqrt()) @ evecs.T
