from crawlherd.cli import entry

entry()
