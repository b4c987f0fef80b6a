"""Datasets of the FSPO recipe as verl RL parquet (see `fspo.data.io` for the row format).

`fspo data <name>` (or `python -m fspo.data <name>`) builds one set of `fspo.data.registry.DATASETS`;
`fspo.data.synthetic.make_rows` generates the synthetic multi-hop set in memory;
`fspo.training.prompt_formats.chat_template` gives the Jinja template verl needs for a prompt format.
"""
