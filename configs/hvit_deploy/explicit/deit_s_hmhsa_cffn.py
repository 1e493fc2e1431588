# ../deit_s_hmhsa_cffn.py with hMHSA in its explicit form (the maps built,
# then IHH and CHH over them), whatever 'auto' picks: the "before" of the
# speed measurements in docs/hmhsa_cffn.md.
_base_ = '../deit_s_hmhsa_cffn.py'

model = dict(backbone=dict(hmhsa_form='explicit'))
