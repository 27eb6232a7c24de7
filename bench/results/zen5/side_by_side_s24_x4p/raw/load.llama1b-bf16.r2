 17:01:24 up  1:02,  0 user,  load average: 1.97, 1.75, 1.43
