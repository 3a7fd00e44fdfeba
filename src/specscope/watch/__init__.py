"""`specscope watch`'s live side: the canary, the passive readers (Prometheus, log tail), the
alert command, the run directory, and the loop that joins them to the pure detector
(analysis/watch). It talks to the server and the disk; every decision is analysis/watch's."""
