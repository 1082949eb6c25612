# script
