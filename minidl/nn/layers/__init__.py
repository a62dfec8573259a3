"""The layers of minidl.nn, one file per family (re-exported by minidl.nn)."""
