# mk/onednn.mk: the oneDNN adapter plugin (plugins/onednn/), included by mk/mutants.mk.
