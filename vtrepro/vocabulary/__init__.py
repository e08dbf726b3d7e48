"""Vocabulary transfer: moving an encoder onto a normalized vocabulary (semantic initialization by
spatial topology) and Activation Potential Calibration."""
