 17:31:07 up  1:31,  0 user,  load average: 2.02, 1.97, 1.84
