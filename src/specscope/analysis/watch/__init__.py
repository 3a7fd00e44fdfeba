"""Watch: the pure side of `specscope watch` (continuous diagnosis of a live server).

Everything here takes numbers and times as arguments and does no I/O, so the detector can be
driven on virtual time (tests, bench/watch_detection.py) exactly as the live loop drives it:
- sample.py: one canary request -> its commit length, step time and position halves;
- window.py: a window's figures with intervals;
- cusum.py: the one-sided CUSUM and the threshold that gives a stated false-alarm rate;
- detector.py: the warm-up baseline, one CUSUM per factor, the speculation_off rule, alerts;
- causes.py: an alert's likely cause, in the diagnosis' vocabulary.
"""
