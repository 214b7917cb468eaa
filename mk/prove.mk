# mk/prove.mk: included by the Makefile (its rules for this area live here).
