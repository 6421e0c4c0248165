"""Thin HTTP handlers; every /v1 call runs through `traced`, which writes its audit trace."""
