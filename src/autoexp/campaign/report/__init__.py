"""Reports, pure: experiment and campaign tables, the scaling-law fit and its checks, optimum laws."""
