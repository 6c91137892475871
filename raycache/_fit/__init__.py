"""FIT: what training and the probe share to fit a model on a cache's rows: a worker's part read
(`part`), the validation split by key (`split`), and the solvers (`logreg` on `lbfgs`)."""
