"""The adversarial suite (issue 14): hostile inputs to every public function and CLI option.

One file per package (measures, attention, flows, metrics, plot, pretrained, the CLI with
the experiment configs, the sweep spec); ``strategies.py`` holds the hypothesis strategies
and the catalogues of bad values. Every case asserts either a clear error (its type and the
informative part of its message: what was received, how to fix it) or a finite, documented
result. A case commented "fixed" failed on the code before the suite's fixes. To add one,
put a row in the file's table of errors (a builder, the exception type, the message regex).
The suite runs in the default ``make test`` in under a minute (derandomised hypothesis).
"""
