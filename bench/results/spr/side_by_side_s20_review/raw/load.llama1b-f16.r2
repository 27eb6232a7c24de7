 04:46:24 up  5:19,  0 user,  load average: 1.94, 1.93, 1.66
