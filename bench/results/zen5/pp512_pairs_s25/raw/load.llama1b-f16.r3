 20:02:01 up  4:02,  0 user,  load average: 1.46, 1.75, 1.71
