"""Sampling: which transition steps a batch holds.

Uniform and prioritized samplers (``samplers``), the vectorized sum tree under the prioritized one
(``sum_tree``) and its crash-consistent file of priorities (``priority_file``). Samplers deal in integers
and priorities only, never in frames or rows: this family imports the base modules and nothing else.
"""
