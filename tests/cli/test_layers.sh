#!/usr/bin/env bash
# The include-direction check runs as part of the test suite.
exec "${CINFER_SRC:-.}/scripts/check_layers.sh"
