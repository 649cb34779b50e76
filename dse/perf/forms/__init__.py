"""Time models of the op families, in the forms `dse calibrate` fits to measured kernels.

One module per family; each holds pure numpy functions of shapes and a few physical parameters
(fractions of a peak, half-saturation sizes, fixed floors in seconds). The performance model
(`dse.perf.roofline`, `dse.perf.collectives`) calls them with the fitted parameters of the
row's GPU; `dse.calibrate` calls the same functions to fit them. The only place these forms live.
"""
