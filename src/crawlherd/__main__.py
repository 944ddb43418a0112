from crawlherd.cli import main

main()
