"""Reports: a run's story, or several runs compared, as one self-contained HTML file."""
