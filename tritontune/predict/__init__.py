"""Predictions without a server: a discrete-event model of Triton's dynamic batcher.

Measuring a config on a real server takes seconds to minutes; the model ranks thousands of
configs and loads in that time, from a few measured service times, so that a search measures
only the configs worth measuring.

Modules are imported by their own names (``tritontune.predict.batcher``: ``ServiceCurve``,
``BatcherConfig``, ``OpenLoop``, ``ClosedLoop``, ``Replay``, ``simulate``, ``operating_point``);
this package re-exports nothing, so there is one way to import each name.
"""
