"""The evidence model: declared, typed columns computed once per diagnosis.

``registry`` declares every evidence name (unit, meaning, producer, source, precedence);
``compute_evidence`` (``build``) fills the tables from the dataset and the analyses;
``ClusterEvidence`` (``model``) is what rules and the report read.
"""
