"""The studies under results/: each a declaration of its rows, questions and tables
(`vgp_vs_vae`, `dlgm1_families`, `convergence`, `calibration`, `draw`), built on shared parts:
a study's committed runs (`runs`), cell text and tables (`cells`, analysis/report's renderer),
differences between rows (`differences`), curves (`curves`), the spread of a few seeds
(`spread`), answers in words (`answers`), and the README generator (`readme`); besides, what
the study scripts run: `paired_differences`, `paired_evaluations`, `progress` and `reproduction`.

A new study is one declaration module named as its results folder (`STUDY = Study(...)`, its
README's tables and values) and one README, results/<study>/README.md: the generator finds it.
"""
