"""Lyra's Grafana dashboards, read at run time: ``lyra report`` plots their panels, and the chart's generator
(:mod:`lyra.chart.sources`) writes them as JSON. :mod:`grafana` is a small typed model of Grafana's dashboard JSON;
:mod:`definitions` holds Lyra's three dashboards in it, with PromQL built from the metric definitions."""
