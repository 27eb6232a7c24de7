 23:04:11 up  2:38,  0 user,  load average: 2.04, 1.92, 1.66
