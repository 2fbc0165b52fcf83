"""Task families. Each one samples batches of prompts on the device of the generator it is given."""

from icl_utils.tasks.linear import LinearRegression

__all__ = ["LinearRegression"]
