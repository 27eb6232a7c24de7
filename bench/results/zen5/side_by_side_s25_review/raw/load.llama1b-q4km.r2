 22:02:39 up  6:03,  0 user,  load average: 1.97, 1.69, 1.23
