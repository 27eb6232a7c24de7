 06:37:56 up  7:11,  0 user,  load average: 1.98, 1.80, 1.47
