 01:20:18 up  1:53,  0 user,  load average: 2.02, 1.97, 1.76
