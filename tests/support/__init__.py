"""Test support shared by tests/ and bench/: doubles and helpers, no tests and no pytest fixtures.

Importing it loads no conftest (bench/ runs outside pytest): its modules import nothing of tests/.
"""
