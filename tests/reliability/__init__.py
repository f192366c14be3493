"""The reliability suite: faults Hilo must survive (issue 13); run by `make test`."""
