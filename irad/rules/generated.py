"""Home of the named pullbacks that ``scalar_rule`` generates (``numpy_tanh_pullback``, ...).

They are set as attributes of this module so that each one has an importable qualified name.
"""
